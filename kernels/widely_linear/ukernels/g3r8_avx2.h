// Inline pieces shared by the AVX2 lookup micro-kernels (layout g3r8x4, see lookup_layout.cc),
// so that the fused kernel and the single sub-GEMV sum in the same order.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace cpukern::widely_linear::g3r8_avx2 {

#define CPUKERN_WL_INLINE inline __attribute__((always_inline))

// The "+1" and "-1" 3-bit patterns of group g of a chunk, in the low bits of each lane
// (vpermps reads only bits 0..2 of an index).
struct Idx {
  __m256i pos, neg;
};
template <int g>
CPUKERN_WL_INLINE Idx decode(__m256i chunk) {
  return {_mm256_srli_epi32(chunk, 3 * g), _mm256_srli_epi32(chunk, 15 + 3 * g)};
}

// acc += T[pos pattern] - T[neg pattern] per lane (row).
CPUKERN_WL_INLINE __m256 lookup(__m256 acc, Idx i, const float* table) {
  const __m256 t = _mm256_load_ps(table);
  return _mm256_add_ps(acc, _mm256_sub_ps(_mm256_permutevar8x32_ps(t, i.pos),
                                          _mm256_permutevar8x32_ps(t, i.neg)));
}

}  // namespace cpukern::widely_linear::g3r8_avx2
