// The SIMDe build of the AVX-512 micro-kernels as a variant row (tests only; runs on any
// host, slowly). Not part of the :ternary library or of the registry.
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {

const Variant* simde_variants(int* count) {
  static const Variant v[] = {
      {{"simde_avx512", 0, -1,
        {ternary_gemv_f32_t2p16r16_16x1__simde_avx512.name,
         ternary_gemv_f32_t2p16r16_16x1__simde_avx512, ternary_gemv_i8_q2b256_4x1__simde_avx512}}},
  };
  *count = 1;
  return v;
}

}  // namespace cpukern::ternary
