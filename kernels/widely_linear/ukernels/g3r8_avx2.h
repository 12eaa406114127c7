// The AVX2 vector traits of the g3r8x4 lookup kernels (lookup_impl.h): 8 rows per ymm,
// 3-column groups, 8-entry subset-sum tables looked up with vpermps (which reads only bits
// 0..2 of each index lane, so a pattern is a plain right shift of the chunk lane).
// Internal linkage: inlined into each kernel file.
#pragma once
#include <immintrin.h>

#include "kernels/widely_linear/ukernels/lookup_impl.h"
#include "kernels/widely_linear/ukernels/lookup_layout.h"
#include "kernels/widely_linear/ukernels/signed_impl.h"

namespace cpukern::widely_linear {
namespace {

struct G3R8Avx2 {
  using vec = __m256;
  using ivec = __m256i;
  static constexpr int kR = lookup::kG3R8.R, kG = lookup::kG3R8.G, kK = lookup::kG3R8.K;
  static constexpr int kNegShift = lookup::kG3R8.neg_shift, kE = 1 << kG, kAccRegs = 8;
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
  // signed_impl.h: byte offset 64 * (b3(pos) + 2 b3(neg)) of the group at bit `n` per lane
  // (vpermd reads bits 0..2 of each index lane).
  static constexpr int kLogR = 3;
  template <int n>
  static CPUKERN_WL_INLINE ivec code_off(ivec w) {
    const ivec t1 = _mm256_setr_epi32(0, 64, 192, 256, 576, 640, 768, 832);
    const ivec t2 = _mm256_setr_epi32(0, 128, 384, 512, 1152, 1280, 1536, 1664);
    return _mm256_add_epi32(_mm256_permutevar8x32_epi32(t1, shift<n>(w)),
                            _mm256_permutevar8x32_epi32(t2, shift<kNegShift + n>(w)));
  }
  // d[0..16) = a[0..16) - b[0..16).
  static CPUKERN_WL_INLINE void sub16(float* d, const float* a, const float* b) {
    _mm256_store_ps(d, _mm256_sub_ps(_mm256_load_ps(a), _mm256_load_ps(b)));
    _mm256_store_ps(d + 8, _mm256_sub_ps(_mm256_load_ps(a + 8), _mm256_load_ps(b + 8)));
  }
  static CPUKERN_WL_INLINE void store_i(int32_t* p, ivec v) {
    _mm256_store_si256(reinterpret_cast<ivec*>(p), v);
  }
};

}  // namespace
}  // namespace cpukern::widely_linear
