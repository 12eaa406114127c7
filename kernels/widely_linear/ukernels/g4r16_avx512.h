// Inline pieces shared by the AVX-512 lookup micro-kernels (layout g4r16x4, see
// lookup_layout.cc), so that the fused kernel and the single sub-GEMV sum in the same order.
// Compiles natively or against SIMDe (CPUKERN_SIMDE).
#pragma once
#include <cstdint>

#include "kernels/common/simd_x86.h"

// GCC 12's AVX-512 intrinsics use "undefined" sources that it then warns about.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace cpukern::widely_linear::g4r16_avx512 {

#define CPUKERN_WL_INLINE inline __attribute__((always_inline))

// The "+1" and "-1" 4-bit patterns of group g of a chunk, in the low bits of each lane
// (vpermps reads only bits 0..3 of an index).
struct Idx {
  __m512i pos, neg;
};
template <int g>
CPUKERN_WL_INLINE Idx decode(__m512i chunk) {
  return {_mm512_srli_epi32(chunk, 4 * g), _mm512_srli_epi32(chunk, 16 + 4 * g)};
}

// acc += T[pos pattern] - T[neg pattern] per lane (row).
CPUKERN_WL_INLINE __m512 lookup(__m512 acc, Idx i, const float* table) {
  const __m512 t = _mm512_load_ps(table);
  return _mm512_add_ps(acc, _mm512_sub_ps(_mm512_permutexvar_ps(i.pos, t),
                                          _mm512_permutexvar_ps(i.neg, t)));
}

}  // namespace cpukern::widely_linear::g4r16_avx512

#if defined(CPUKERN_SIMDE)
// The SIMDe build of the same source gets its own symbols.
#define widely_linear_f32_g4r16x4_16x1__avx512_bmi2 widely_linear_f32_g4r16x4_16x1__simde_avx512
#define widely_linear_f32_g4r16x4_gemv_16x1__avx512_bmi2 \
  widely_linear_f32_g4r16x4_gemv_16x1__simde_avx512
#endif
