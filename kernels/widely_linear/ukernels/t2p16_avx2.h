// Inline pieces shared by the AVX2 fused and sub-GEMV micro-kernels (public layout), so
// that both sum every dot product in the same order: 8-lane accumulators (lane = column
// mod 8), per word the low half (columns 0..7) then the high half (8..15).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace cpukern::widely_linear::t2p16_avx2 {

#define CPUKERN_WL_INLINE inline __attribute__((always_inline))

// Lane selectors of one half word, in the sign bits: pos = "+1" lanes, neg = "-1" lanes.
struct Sel {
  __m256 pos, neg;
};

// AVX2 only: one variable shift moves code j's "+1" bit to bit 31 and its "-1" bit to 30.
CPUKERN_WL_INLINE Sel decode_shift(uint32_t w, int half) {
  const __m256i shifts = half ? _mm256_setr_epi32(14, 12, 10, 8, 6, 4, 2, 0)
                              : _mm256_setr_epi32(30, 28, 26, 24, 22, 20, 18, 16);
  const __m256i p = _mm256_sllv_epi32(_mm256_set1_epi32(int(w)), shifts);
  return {_mm256_castsi256_ps(p), _mm256_castsi256_ps(_mm256_slli_epi32(p, 1))};
}

// acc += w * x for one half: x where "+1", the precomputed -x (O3) where "-1", 0 elsewhere.
CPUKERN_WL_INLINE __m256 step(__m256 acc, Sel s, __m256 x, __m256 neg_x) {
  __m256 v = _mm256_blendv_ps(_mm256_setzero_ps(), x, s.pos);
  v = _mm256_blendv_ps(v, neg_x, s.neg);
  return _mm256_add_ps(acc, v);
}

// Fixed reduction tree: 8 -> 4 -> 2 -> 1.
CPUKERN_WL_INLINE float hsum(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

}  // namespace cpukern::widely_linear::t2p16_avx2
