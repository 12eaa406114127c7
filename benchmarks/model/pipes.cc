// Measured pipe sharing of the avx2 MXFP4 decode GEMV's instruction mix on the CPU it runs on:
// the one-row loop's work per 256 weights (4 panels x 4 k x 16 columns), written as fixed
// assembly so the compiler's register allocation plays no part, on L1-resident data:
//   fma            the 32 FMAs alone (8 accumulators, 4 each: the latency of the chains)
//   decode         the decode alone: per panel one 32-byte load, the nibble split (vpsrlw,
//                  2 vpand), 4 vpshufb, 4 vpunpck*bw, 4 vpslld + 4 vpand (fp32 widening)
//   decode+fma     both, each FMA taking its decoded operand (the kernel's dependencies; the
//                  k order inside a panel aside)
//   independent    both, the FMAs on ready registers (the mix's throughput alone)
// Reported as cycles per 256 weights at the measured clock. The README's "MXFP4 performance
// (avx2 variant)" reads them: when decode+fma is far above fma, the decode's shuffles and
// shifts share pipes with the FMAs, and this mix bounds the 1-row GEMV's weights per cycle.
// `./bazelw run //benchmarks/model:pipes`
#include <benchmark/benchmark.h>

#include <cstdint>

#include "benchmarks/common/machine.h"

#if defined(__x86_64__)
namespace {

// The FMAs of one k of a panel (accumulators A0, A1): taking the decoded even / odd operands
// (ymm9, ymm12), ready registers instead, or none.
#define CPUKERN_FMA_DECODED(A0, A1) \
  "vfmadd231ps %%ymm9, %%ymm13, " A0 "\n vfmadd231ps %%ymm12, %%ymm13, " A1 "\n"
#define CPUKERN_FMA_READY(A0, A1) \
  "vfmadd231ps %%ymm14, %%ymm15, " A0 "\n vfmadd231ps %%ymm14, %%ymm15, " A1 "\n"
#define CPUKERN_FMA_NONE(A0, A1) ""

// Two k of a panel from one code register (ymm8): split, look up, unpack, widen, FMA.
#define CPUKERN_DECODE_HALF(SHIFT, K0, K1, A0, A1, FMA) \
  SHIFT "vpand (%2), %%ymm8, %%ymm9\n"                  \
        "vpshufb %%ymm9, %%ymm14, %%ymm10\n"            \
        "vpshufb %%ymm9, %%ymm15, %%ymm11\n"            \
        "vpunpcklbw %%ymm11, %%ymm10, %%ymm12\n"        \
        "vbroadcastss " K0 "(%1), %%ymm13\n"            \
        "vpslld $16, %%ymm12, %%ymm9\n"                 \
        "vpand 32(%2), %%ymm12, %%ymm12\n" FMA(A0, A1)  \
        "vpunpckhbw %%ymm11, %%ymm10, %%ymm12\n"        \
        "vbroadcastss " K1 "(%1), %%ymm13\n"            \
        "vpslld $16, %%ymm12, %%ymm9\n"                 \
        "vpand 32(%2), %%ymm12, %%ymm12\n" FMA(A0, A1)
// One panel: 64 weights (4 k x 16 columns) from the 32 bytes at OFF(%0).
#define CPUKERN_DECODE_PANEL(OFF, A0, A1, FMA)                        \
  "vmovdqu " OFF "(%0), %%ymm8\n" CPUKERN_DECODE_HALF("", "0", "4", A0, A1, FMA) \
      CPUKERN_DECODE_HALF("vpsrlw $4, %%ymm8, %%ymm8\n", "8", "12", A0, A1, FMA)
#define CPUKERN_DECODE_256(FMA)                          \
  CPUKERN_DECODE_PANEL("0", "%%ymm0", "%%ymm1", FMA)     \
  CPUKERN_DECODE_PANEL("32", "%%ymm2", "%%ymm3", FMA)    \
  CPUKERN_DECODE_PANEL("64", "%%ymm4", "%%ymm5", FMA)    \
  CPUKERN_DECODE_PANEL("96", "%%ymm6", "%%ymm7", FMA)
#define CPUKERN_FMA_256                                                                  \
  CPUKERN_FMA_READY("%%ymm0", "%%ymm1") CPUKERN_FMA_READY("%%ymm2", "%%ymm3")             \
  CPUKERN_FMA_READY("%%ymm4", "%%ymm5") CPUKERN_FMA_READY("%%ymm6", "%%ymm7")

alignas(64) uint8_t g_weights[128];
alignas(64) float g_act[16];
alignas(64) uint8_t g_masks[64];  // nibble mask bytes, then the high-half dword mask

#define CPUKERN_CLOBBERS                                                                   \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "memory"

enum Mix { kFma, kDecode, kDecodeFma, kIndependent };

template <Mix kMix>
void run_mix(benchmark::State& state) {
  for (int i = 0; i < 32; ++i) g_masks[i] = 15, g_masks[32 + i] = i % 4 >= 2 ? 0xff : 0;
  for (int i = 0; i < 128; ++i) g_weights[i] = uint8_t(i * 37);
  // ymm14 / ymm15: the lookup tables (zeros: the values do not matter) and the ready operands.
  asm volatile("vxorps %%ymm14, %%ymm14, %%ymm14\n vxorps %%ymm15, %%ymm15, %%ymm15" ::
                   : "xmm14", "xmm15");
  constexpr int64_t kReps = 1 << 12;
  for (auto _ : state)
    for (int64_t r = 0; r < kReps; ++r) {
      if constexpr (kMix == kFma)
        asm volatile(CPUKERN_FMA_256 CPUKERN_FMA_256 CPUKERN_FMA_256 CPUKERN_FMA_256 ::
                         : CPUKERN_CLOBBERS);
      if constexpr (kMix == kDecode)
        asm volatile(CPUKERN_DECODE_256(CPUKERN_FMA_NONE)::"r"(g_weights), "r"(g_act),
                     "r"(g_masks)
                     : CPUKERN_CLOBBERS);
      if constexpr (kMix == kDecodeFma)
        asm volatile(CPUKERN_DECODE_256(CPUKERN_FMA_DECODED)::"r"(g_weights), "r"(g_act),
                     "r"(g_masks)
                     : CPUKERN_CLOBBERS);
      if constexpr (kMix == kIndependent)
        asm volatile(CPUKERN_DECODE_256(CPUKERN_FMA_READY)::"r"(g_weights), "r"(g_act),
                     "r"(g_masks)
                     : CPUKERN_CLOBBERS);
    }
  static const double ghz = cpukern::bench::measured_clock_ghz();
  // time per repetition x clock = cycles per 256 weights
  state.counters["cycles/256w"] =
      benchmark::Counter(double(kReps) / (ghz * 1e9),
                         benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

BENCHMARK(run_mix<kFma>)->Name("avx2_mxfp4_gemv/fma");
BENCHMARK(run_mix<kDecode>)->Name("avx2_mxfp4_gemv/decode");
BENCHMARK(run_mix<kDecodeFma>)->Name("avx2_mxfp4_gemv/decode+fma");
BENCHMARK(run_mix<kIndependent>)->Name("avx2_mxfp4_gemv/independent");

}  // namespace
#endif

int main(int argc, char** argv) {
#if defined(__x86_64__)
  cpukern::bench::add_machine_context();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
#else
  (void)argc, (void)argv;
#endif
  return 0;
}
