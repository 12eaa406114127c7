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
      // Priorities follow speed measured on AMD Zen 4 (AVX-512F/BW/VL/VNNI, fast pext;
      // 4096x14336 etc., batch 1 and 16, 1 and 2 threads; see the README table), so the
      // default is the fastest variant the CPU runs:
      //   avx512_vnni (50) = avx512's fp32 kernel (the lut27r16 vpermt2ps lookup, ~2.5x the
      //     AVX2 lookup kernel) + the q2b256 int8 kernel with vpdpbusd at batch 1 (11-21%
      //     faster there than vpmaddubsw; batch >= 2 runs vpmaddubsw, which was faster);
      //   avx512 (40) = the same fp32 kernel, int8 with vpmaddubsw (AVX-512 without VNNI);
      //   avx2_bmi2 (20), avx2 (10) = the lut3r8 vpermps lookup kernel (the same code; the
      //     bmi2 row only packs with pext);
      //   avx512_bmi2 (5) = the FairyFuse paper's kernel (pext + mask_add/mask_sub), kept
      //     exactly for the mission and its tests: one masked add and one masked subtract per
      //     16 weights are slower here than the AVX2 lookup kernel (6.5-13 vs 17-27
      //     Gweights/s fp32), so it is never the default where another x86 row runs.
      {{"avx2", kAVX2 | kFMA, 10,
        {ternary_gemv_f32_lut3r8_8x1__avx2.name, ternary_gemv_f32_lut3r8_8x1__avx2,
         ternary_gemv_i8_q2b128_4x1__avx2}}},
      {{"avx2_bmi2", kAVX2 | kFMA | kBMI2 | kFastPext, 20,
        {ternary_gemv_f32_lut3r8_8x1__avx2_bmi2.name, ternary_gemv_f32_lut3r8_8x1__avx2_bmi2,
         ternary_gemv_i8_q2b128_4x1__avx2_bmi2}}},
      // AVX-512BW/VL are required too: the int8 micro-kernel uses byte/word instructions.
      {{"avx512_bmi2", kAVX512F | kAVX512BW | kAVX512VL | kFMA | kBMI2 | kFastPext, 5,
        {ternary_gemv_f32_t2p16r16_16x1__avx512_bmi2.name,
         ternary_gemv_f32_t2p16r16_16x1__avx512_bmi2, ternary_gemv_i8_q2b256_4x1__avx512_bmi2}}},
      // No BMI2: the lookup kernel and its packer need no pext (Zen 1/2 have none fast).
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
