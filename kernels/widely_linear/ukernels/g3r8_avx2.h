// The AVX2 vector traits of the g3r8x4 lookup kernels (lookup_impl.h): 8 rows per ymm,
// 3-column groups, 8-entry subset-sum tables looked up with vpermps (which reads only bits
// 0..2 of each index lane, so a pattern is a plain right shift of the chunk lane).
// Internal linkage: the avx2 and avx2_bmi2 libraries compile this with different flags.
#pragma once
#include <immintrin.h>

#include "kernels/widely_linear/ukernels/lookup_impl.h"

namespace cpukern::widely_linear {
namespace {

struct G3R8Avx2 {
  using vec = __m256;
  using ivec = __m256i;
  static constexpr int kR = 8, kG = 3, kK = 5, kNegShift = 15, kE = 8, kAccRegs = 8;
  static CPUKERN_WL_INLINE vec zero() { return _mm256_setzero_ps(); }
  static CPUKERN_WL_INLINE ivec load(const ivec* p) { return _mm256_load_si256(p); }
  template <int n>
  static CPUKERN_WL_INLINE ivec shift(ivec v) {
    return _mm256_srli_epi32(v, n);
  }
  // acc += T[pos] - T[neg] per lane (row).
  static CPUKERN_WL_INLINE vec lookup(vec acc, ivec pos, ivec neg, const float* table) {
    const __m256 t = _mm256_load_ps(table);
    return _mm256_add_ps(acc, _mm256_sub_ps(_mm256_permutevar8x32_ps(t, pos),
                                            _mm256_permutevar8x32_ps(t, neg)));
  }
  static CPUKERN_WL_INLINE void store(float* p, vec v) { _mm256_store_ps(p, v); }
};

}  // namespace
}  // namespace cpukern::widely_linear
