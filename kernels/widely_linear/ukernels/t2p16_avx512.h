// The paper's AVX-512F + BMI2 micro-kernels (FairyFuse), public 2-bit layout, shared by the
// fused and the single sub-GEMV kernel so that both sum every dot product in the same
// order: lanes = the 16 columns of a word; per word, k_pos = pext(word, 0xAAAAAAAA) and
// k_neg = pext(word, 0x55555555), then acc = mask_add(acc, k_pos, acc, x) and
// acc = mask_sub(acc, k_neg, acc, x). Compiles natively or against SIMDe (CPUKERN_SIMDE).
#pragma once
#include <cstdint>

#include "kernels/widely_linear/ukernels/avx512.h"

namespace cpukern::widely_linear {
namespace {

#if defined(CPUKERN_SIMDE)
using mask16 = simde__mmask16;
#else
using mask16 = __mmask16;
#endif

// One decoded word: the "add" and "subtract" lane masks.
struct Masks {
  mask16 pos, neg;
};

CPUKERN_WL_INLINE Masks decode(uint32_t w) {
  return {static_cast<mask16>(_pext_u32(w, 0xAAAAAAAAu)),
          static_cast<mask16>(_pext_u32(w, 0x55555555u))};
}

// acc += w * x lane-wise, as a masked add and a masked subtract.
CPUKERN_WL_INLINE __m512 step(__m512 acc, Masks k, __m512 x) {
  acc = _mm512_mask_add_ps(acc, k.pos, acc, x);
  return _mm512_mask_sub_ps(acc, k.neg, acc, x);
}

// Fixed reduction tree: 16 -> 8 -> 4 -> 2 -> 1.
CPUKERN_WL_INLINE float hsum(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

}  // namespace
}  // namespace cpukern::widely_linear

