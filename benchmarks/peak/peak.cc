// The machine's arithmetic peak, measured: one loop per instruction that GEMM micro-kernels
// are built on, each with enough independent accumulators to cover its latency, on registers
// only (no memory operands), so that the loop runs at the instruction's throughput:
//   fma/ymm, fma/zmm              vfmadd231ps                      (2 FLOP per fp32 lane)
//   maddubs_add/ymm, .../zmm      vpmaddubsw + vpaddw, int16 sums  (the AVX2 / AVX-512BW int8
//                                                                   pair: 2 ops per u8 x s8)
//   dpbusd/ymm (AVX-VNNI), dpbusd/zmm (AVX-512 VNNI)  vpdpbusd     (2 ops per u8 x s8)
//   dpbf16/zmm                    vdpbf16ps                        (2 FLOP per bf16 pair)
//   amx_bf16, amx_int8            tdpbf16ps / tdpbssd on 16x64-byte tiles
// Counters: instr_per_cycle (at the clock measured in the same run: benchmarks/common/machine.h),
// Gop/s, and op/cycle. A kernel's fraction of the peak is its op/s over the row of the
// instruction it runs on (docs/performance/peak.md). Rows a CPU lacks are skipped, saying why.
// `./bazelw run //benchmarks/peak`
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "benchmarks/common/machine.h"
#include "kernels/common/cpu_features.h"
#include "kernels/common/isa.h"

#if defined(__x86_64__)
namespace cpukern {
namespace {

constexpr int64_t kIters = 1 << 20;  // loop trips per benchmark iteration

// 12 independent accumulators (ymm/zmm 4..15): a 4-5 cycle latency at 2 per cycle needs 10.
#define CPUKERN_12(OP) \
  OP(4) OP(5) OP(6) OP(7) OP(8) OP(9) OP(10) OP(11) OP(12) OP(13) OP(14) OP(15)

#define FMA_Y(n) "vfmadd231ps %%ymm0, %%ymm1, %%ymm" #n "\n"
#define FMA_Z(n) "vfmadd231ps %%zmm0, %%zmm1, %%zmm" #n "\n"
// vpmaddubsw into a temporary, vpaddw into the accumulator: 6 pairs per trip (acc 4..9,
// temporaries 10..15).
#define MADD_Y(a, t) "vpmaddubsw %%ymm0, %%ymm1, %%ymm" #t "\n vpaddw %%ymm" #t ", %%ymm" #a ", %%ymm" #a "\n"
#define MADD_Z(a, t) "vpmaddubsw %%zmm0, %%zmm1, %%zmm" #t "\n vpaddw %%zmm" #t ", %%zmm" #a ", %%zmm" #a "\n"
#define MADD_6(M) M(4, 10) M(5, 11) M(6, 12) M(7, 13) M(8, 14) M(9, 15)
#define MADDUBS_Y(n) "vpmaddubsw %%ymm0, %%ymm1, %%ymm" #n "\n"
#define MADDUBS_Z(n) "vpmaddubsw %%zmm0, %%zmm1, %%zmm" #n "\n"
#define DPB_YV(n) "%{vex%} vpdpbusd %%ymm0, %%ymm1, %%ymm" #n "\n"
#define DPB_Z(n) "vpdpbusd %%zmm0, %%zmm1, %%zmm" #n "\n"
#define DPBF_Z(n) "vdpbf16ps %%zmm0, %%zmm1, %%zmm" #n "\n"

#define CPUKERN_LOOP(BODY, CLOBBER)                                                     \
  asm volatile("vpxor %%xmm0, %%xmm0, %%xmm0\n vpxor %%xmm1, %%xmm1, %%xmm1\n"          \
               "mov %0, %%rcx\n"                                                       \
               "1:\n" BODY "dec %%rcx\n jnz 1b\n"                                      \
               "vzeroupper\n"                                                          \
               :                                                                       \
               : "r"(kIters)                                                           \
               : "rcx", "cc", CLOBBER)

#define YMM_ALL "xmm0", "xmm1", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
                "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"

void fma_ymm() { CPUKERN_LOOP(CPUKERN_12(FMA_Y), YMM_ALL); }
void maddubs_ymm() { CPUKERN_LOOP(CPUKERN_12(MADDUBS_Y), YMM_ALL); }
__attribute__((target("avx512f,avx512bw"))) void maddubs_zmm() {
  CPUKERN_LOOP(CPUKERN_12(MADDUBS_Z), YMM_ALL);
}
void madd_ymm() { CPUKERN_LOOP(MADD_6(MADD_Y), YMM_ALL); }
void dpbusd_ymm() { CPUKERN_LOOP(CPUKERN_12(DPB_YV), YMM_ALL); }
__attribute__((target("avx512f"))) void fma_zmm() { CPUKERN_LOOP(CPUKERN_12(FMA_Z), YMM_ALL); }
__attribute__((target("avx512f,avx512bw"))) void madd_zmm() {
  CPUKERN_LOOP(MADD_6(MADD_Z), YMM_ALL);
}
__attribute__((target("avx512f"))) void dpbusd_zmm() { CPUKERN_LOOP(CPUKERN_12(DPB_Z), YMM_ALL); }
__attribute__((target("avx512f"))) void dpbf16_zmm() { CPUKERN_LOOP(CPUKERN_12(DPBF_Z), YMM_ALL); }

// AMX: 4 accumulator tiles (tmm0-3) of 16 rows x 64 bytes, sources tmm4, tmm5.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
void amx_loop(bool int8) {
  TileConfig cfg;
  for (int t = 0; t < 6; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  asm volatile("ldtilecfg %0\n tilezero %%tmm4\n tilezero %%tmm5\n" ::"m"(cfg));
  if (int8)
    asm volatile("mov %0, %%rcx\n 1:\n"
                 "tdpbssd %%tmm5, %%tmm4, %%tmm0\n tdpbssd %%tmm5, %%tmm4, %%tmm1\n"
                 "tdpbssd %%tmm5, %%tmm4, %%tmm2\n tdpbssd %%tmm5, %%tmm4, %%tmm3\n"
                 "dec %%rcx\n jnz 1b\n" ::"r"(kIters / 16) : "rcx", "cc");
  else
    asm volatile("mov %0, %%rcx\n 1:\n"
                 "tdpbf16ps %%tmm5, %%tmm4, %%tmm0\n tdpbf16ps %%tmm5, %%tmm4, %%tmm1\n"
                 "tdpbf16ps %%tmm5, %%tmm4, %%tmm2\n tdpbf16ps %%tmm5, %%tmm4, %%tmm3\n"
                 "dec %%rcx\n jnz 1b\n" ::"r"(kIters / 16) : "rcx", "cc");
  asm volatile("tilerelease" ::: "memory");
}
void amx_bf16() { amx_loop(false); }
void amx_int8() { amx_loop(true); }

struct Row {
  const char* name;
  uint64_t needs;  // cpu_features bits
  void (*loop)();
  double instr_per_trip;
  double ops_per_instr;  // FLOP, or 2 per int8 multiply-add
};

const Row kRows[] = {
    {"fma/ymm", isa::avx2, fma_ymm, 12, 16},
    {"fma/zmm", isa::avx512, fma_zmm, 12, 32},
    // vpmaddubsw alone (its throughput), and with the vpaddw that sums its int16 pairs
    // (counted as one instruction: what an AVX2 int8 kernel issues per multiply)
    {"maddubs/ymm", isa::avx2, maddubs_ymm, 12, 64},
    {"maddubs/zmm", isa::avx512, maddubs_zmm, 12, 128},
    {"maddubs_add/ymm", isa::avx2, madd_ymm, 6, 64},
    {"maddubs_add/zmm", isa::avx512, madd_zmm, 6, 128},
    {"dpbusd/ymm", isa::avx_vnni, dpbusd_ymm, 12, 64},
    {"dpbusd/zmm", isa::avx512_vnni, dpbusd_zmm, 12, 128},
    {"dpbf16/zmm", isa::avx512_bf16, dpbf16_zmm, 12, 64},
    // 16 rows x 16 fp32 lanes x 32 bf16 pairs / 16 x 16 x 64 int8 quads per instruction
    {"amx_bf16", isa::amx, amx_bf16, 4.0 / 16, 2 * 16 * 16 * 32},
    {"amx_int8", isa::amx, amx_int8, 4.0 / 16, 2 * 16 * 16 * 64},
};

void run(benchmark::State& state, const Row* row) {
  if (!cpu_has(row->needs)) {
    state.SkipWithError((std::string("this CPU lacks ") + row->name + "'s instructions").c_str());
    return;
  }
  const double ghz = bench::measured_clock_ghz();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) row->loop();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double instr = double(state.iterations()) * double(kIters) * row->instr_per_trip;
  state.counters["Gop_per_s"] = instr * row->ops_per_instr / s * 1e-9;
  state.counters["instr_per_cycle"] = ghz > 0 ? instr / s / (ghz * 1e9) : 0;
  state.counters["op_per_cycle"] = ghz > 0 ? instr * row->ops_per_instr / s / (ghz * 1e9) : 0;
}

const bool registered = [] {
  bench::add_machine_context();
  for (const Row& r : kRows)
    benchmark::RegisterBenchmark(r.name, run, &r)->UseRealTime()->Unit(benchmark::kMicrosecond);
  return true;
}();

}  // namespace
}  // namespace cpukern
#endif
