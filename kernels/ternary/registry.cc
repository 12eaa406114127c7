// The one table of ternary GEMV variants. x86 rows only where they can be compiled.
#include <vector>

#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

const std::vector<Variant>& table() {
  static const std::vector<Variant> t = {
      {{"reference", 0, 0,
        {ternary_gemv_f32_t2p16_1x1__scalar.name, ternary_gemv_f32_t2p16_1x1__scalar,
         ternary_gemv_i8_t2p16_1x1__scalar}}},
#if defined(__x86_64__)
      {{"avx2", kAVX2 | kFMA, 10,
        {ternary_gemv_f32_lut3r8_8x1__avx2.name, ternary_gemv_f32_lut3r8_8x1__avx2,
         ternary_gemv_i8_q2b128_4x1__avx2}}},
      {{"avx2_bmi2", kAVX2 | kFMA | kBMI2 | kFastPext, 20,
        {ternary_gemv_f32_lut3r8_8x1__avx2_bmi2.name, ternary_gemv_f32_lut3r8_8x1__avx2_bmi2,
         ternary_gemv_i8_q2b128_4x1__avx2_bmi2}}},
      // AVX-512BW/VL are required too: the int8 micro-kernel uses byte/word instructions.
      {{"avx512_bmi2", kAVX512F | kAVX512BW | kAVX512VL | kFMA | kBMI2 | kFastPext, 30,
        {ternary_gemv_f32_t2p16r16_16x1__avx512_bmi2.name,
         ternary_gemv_f32_t2p16r16_16x1__avx512_bmi2, ternary_gemv_i8_q2b256_4x1__avx512_bmi2}}},
      {{"avx512", kAVX512F | kAVX512BW | kAVX512VL | kFMA, 40,
        {ternary_gemv_f32_lut27r16_16x1__avx512.name, ternary_gemv_f32_lut27r16_16x1__avx512,
         ternary_gemv_i8_q2b256_4x1__avx512}}},
      {{"avx512_vnni", kAVX512F | kAVX512BW | kAVX512VL | kAVX512VNNI | kFMA, 50,
        {ternary_gemv_f32_lut27r16_16x1__avx512.name, ternary_gemv_f32_lut27r16_16x1__avx512,
         ternary_gemv_i8_q2b256_4x1__avx512_vnni}}},
#endif
  };
  return t;
}

}  // namespace

const Registry<TernaryGemvUkernel>& registry() {
  static const Registry<TernaryGemvUkernel> r = [] {
    std::vector<cpukern::Variant<TernaryGemvUkernel>> base(table().begin(), table().end());
    return Registry<TernaryGemvUkernel>("ternary_gemv", std::move(base));
  }();
  return r;
}

const Variant& select_variant(const std::string& isa) {
  const auto& r = registry();
  const auto& v = r.select(isa.c_str());
  return table()[size_t(&v - r.variants().data())];
}

std::vector<VariantInfo> list_variants() { return registry().info(); }

}  // namespace cpukern::ternary
