// The SIMDe build of the AVX-512 micro-kernels as variant rows (tests only; runs on any
// host, slowly). Not part of the :ternary library or of the registry.
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {

const Variant* simde_variants(int* count) {
  static const Variant v[] = {
      // The avx512_bmi2 row's sources (the paper's pext kernel, q2b256 vpmaddubsw).
      {{"simde_avx512_bmi2", 0, -1,
        {ternary_gemv_f32_t2p16r16_16x1__simde_avx512.name,
         ternary_gemv_f32_t2p16r16_16x1__simde_avx512, ternary_gemv_i8_q2b256_4x1__simde_avx512}}},
      // The avx512 row's fp32 source (lut27r16) and the avx512_vnni int8 source (the avx512
      // row's int8 kernel is the q2b256 source above).
      {{"simde_avx512", 0, -1,
        {ternary_gemv_f32_lut27r16_16x1__simde_avx512.name,
         ternary_gemv_f32_lut27r16_16x1__simde_avx512,
         ternary_gemv_i8_q2b256_4x1__simde_avx512_vnni}}},
  };
  *count = 2;
  return v;
}

}  // namespace cpukern::ternary
