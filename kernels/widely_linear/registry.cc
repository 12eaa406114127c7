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
                 nullptr, nullptr,   fused, gemv};
}

#define CPUKERN_WL_PUBLIC(fused, gemv, mr) public_layout(#fused, #gemv, mr, fused, gemv)

const std::vector<Variant>& table() {
  static const std::vector<Variant> rows = {
      row("reference", 0, 0,
          CPUKERN_WL_PUBLIC(widely_linear_f32_t2p16x4_1x1__scalar,
                            widely_linear_f32_t2p16x4_gemv_1x1__scalar, 1)),
#if defined(__x86_64__)
      row("avx2", kAVX2 | kFMA, 10,
          CPUKERN_WL_PUBLIC(widely_linear_f32_t2p16x4_1x1__avx2,
                            widely_linear_f32_t2p16x4_gemv_4x1__avx2, 4)),
      row("avx2_bmi2", kAVX2 | kFMA | kBMI2 | kFastPext, 20,
          Ukernel{"widely_linear_f32_g3r8x4_8x1__avx2_bmi2",
                  "widely_linear_f32_g3r8x4_gemv_8x1__avx2_bmi2", 8, g3r8::packed_size,
                  g3r8::pack, g3r8::table_floats, g3r8::build_table,
                  widely_linear_f32_g3r8x4_8x1__avx2_bmi2,
                  widely_linear_f32_g3r8x4_gemv_8x1__avx2_bmi2}),
      row("avx512_bmi2", kAVX512F | kBMI2 | kFastPext, 30,
          Ukernel{"widely_linear_f32_g4r16x4_16x1__avx512_bmi2",
                  "widely_linear_f32_g4r16x4_gemv_16x1__avx512_bmi2", 16, g4r16::packed_size,
                  g4r16::pack, g4r16::table_floats, g4r16::build_table,
                  widely_linear_f32_g4r16x4_16x1__avx512_bmi2,
                  widely_linear_f32_g4r16x4_gemv_16x1__avx512_bmi2}),
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
