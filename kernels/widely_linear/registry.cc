// The one table of widely-linear variants.
#include <vector>

#include "kernels/common/cpu_features.h"
#include "kernels/widely_linear/ukernel.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {
namespace {

Variant row(const char* name, uint64_t required, int priority, const Ukernel& uk) {
  Variant v;
  v.name = name;
  v.required = required;
  v.priority = priority;
  v.ukernel = uk;
  return v;
}

Ukernel public_layout(const char* name, const char* gemv_name, int mr,
                      decltype(Ukernel::fused) fused, decltype(Ukernel::gemv) gemv) {
  return Ukernel{name,    gemv_name, mr,    public_layout_size, public_layout_pack,
                 public_layout_locate, nullptr, nullptr, fused, gemv};
}

#define CPUKERN_WL_PUBLIC(fused, gemv, mr) public_layout(#fused, #gemv, mr, fused, gemv)
#define CPUKERN_WL_LOOKUP(layout, packer, fused, gemv, mr, batched, brows)                    \
  Ukernel{#fused,                    #gemv,          mr,                                \
          layout::packed_size,       packer,         layout::locate,                    \
          layout::table_floats,      layout::build_table, fused,                        \
          gemv,                      layout::table_floats_batch,                        \
          layout::build_table_batch, batched,        brows}

// brows: row range per fused_batch call (its signed tables, built per call per column
// block, are reused by this many rows; the ukernel's pass size, signed_impl.h).

// Priorities follow the speed measured on AMD Zen 4 (EPYC, 2 cores; benchmarks/widely_linear,
// fused, B = 1, single thread, CPU time, 4096x4096, S = 1):
//   avx512      16-row lookup kernel (vpermps, 4-column groups), AVX-512F only:  ~0.64 ms;
//   avx2_bmi2   8-row lookup kernel (3-column groups), pext packer:             ~0.94 ms;
//   avx2        the same inner loop, portable packer (no pext anywhere: the fast path
//               on AMD Zen 1/2, whose pext is microcoded). Run time equal to avx2_bmi2;
//               ranked below it because its prepare() is slower (5.4 vs 3.3 ms);
//   avx512_bmi2 the paper's kernel (pext -> add/sub masks, masked add/sub): ~1.85 ms,
//               slower than both lookup kernels (2 masked ops per 16 weights and
//               sub-GEMV vs one lookup per G columns x R rows), so it is never the
//               default where avx2 runs; kept for the FairyFuse comparison / ablation;
//   reference   scalar.
const std::vector<Variant>& table() {
  static const std::vector<Variant> rows = {
      row("reference", 0, 0,
          CPUKERN_WL_PUBLIC(widely_linear_f32_t2p16x4_1x1__scalar,
                            widely_linear_f32_t2p16x4_gemv_1x1__scalar, 1)),
#if defined(__x86_64__)
      row("avx2", kAVX2 | kFMA, 20,
          CPUKERN_WL_LOOKUP(g3r8, g3r8::pack, widely_linear_f32_g3r8x4_8x1__avx2,
                            widely_linear_f32_g3r8x4_gemv_8x1__avx2, 8,
                            widely_linear_f32_g3r8x4_signed_1x8__avx2, 128)),
      row("avx2_bmi2", kAVX2 | kFMA | kBMI2 | kFastPext, 30,
          CPUKERN_WL_LOOKUP(g3r8, g3r8::pack_bmi2, widely_linear_f32_g3r8x4_8x1__avx2_bmi2,
                            widely_linear_f32_g3r8x4_gemv_8x1__avx2_bmi2, 8,
                            widely_linear_f32_g3r8x4_signed_1x8__avx2_bmi2, 128)),
      row("avx512_bmi2", kAVX512F | kBMI2 | kFastPext, 10,
          CPUKERN_WL_PUBLIC(widely_linear_f32_t2p16x4_1x1__avx512_bmi2,
                            widely_linear_f32_t2p16x4_gemv_4x1__avx512_bmi2, 4)),
      row("avx512", kAVX512F, 40,
          CPUKERN_WL_LOOKUP(g4r16, g4r16::pack, widely_linear_f32_g4r16x4_16x1__avx512,
                            widely_linear_f32_g4r16x4_gemv_16x1__avx512, 16,
                            widely_linear_f32_g4r16x4_signed_1x8__avx512, 256)),
#endif
  };
  return rows;
}

}  // namespace

const Registry<Ukernel>& registry() {
  static const Registry<Ukernel> reg("widely_linear", [] {
    std::vector<cpukern::Variant<Ukernel>> rows;
    for (const Variant& v : table()) rows.push_back(v);
    return rows;
  }());
  return reg;
}

const Variant& variant_of(const cpukern::Variant<Ukernel>& r) {
  const auto& rows = registry().variants();
  return table()[size_t(&r - rows.data())];
}

std::vector<VariantInfo> list_variants() { return registry().info(); }

}  // namespace cpukern::widely_linear
