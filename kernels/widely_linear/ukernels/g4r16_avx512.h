// The AVX-512F vector traits of the g4r16x4 lookup kernels (lookup_impl.h): 16 rows per
// zmm, 4-column groups, 16-entry subset-sum tables looked up with vpermps (bits 0..3 of
// each index lane). Needs only AVX-512F. Compiles natively or against SIMDe (CPUKERN_SIMDE);
// internal linkage, since both builds exist in one test binary.
#pragma once
#include "kernels/common/simd_x86.h"
#include "kernels/widely_linear/ukernels/lookup_impl.h"

// GCC 12's AVX-512 intrinsics use "undefined" sources that it then warns about.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace cpukern::widely_linear {
namespace {

struct G4R16Avx512 {
  using vec = __m512;
  using ivec = __m512i;
  static constexpr int kR = 16, kG = 4, kK = 4, kNegShift = 16, kE = 16, kAccRegs = 16;
  static CPUKERN_WL_INLINE vec zero() { return _mm512_setzero_ps(); }
  static CPUKERN_WL_INLINE ivec load(const ivec* p) { return _mm512_load_si512(p); }
  template <int n>
  static CPUKERN_WL_INLINE ivec shift(ivec v) {
    return _mm512_srli_epi32(v, n);
  }
  // acc += T[pos] - T[neg] per lane (row).
  static CPUKERN_WL_INLINE vec lookup(vec acc, ivec pos, ivec neg, const float* table) {
    const __m512 t = _mm512_load_ps(table);
    return _mm512_add_ps(acc, _mm512_sub_ps(_mm512_permutexvar_ps(pos, t),
                                            _mm512_permutexvar_ps(neg, t)));
  }
  static CPUKERN_WL_INLINE void store(float* p, vec v) { _mm512_store_ps(p, v); }
};

}  // namespace
}  // namespace cpukern::widely_linear

#if defined(CPUKERN_SIMDE)
// The SIMDe build of the same source gets its own symbols.
#define widely_linear_f32_g4r16x4_16x1__avx512 widely_linear_f32_g4r16x4_16x1__simde_avx512
#define widely_linear_f32_g4r16x4_gemv_16x1__avx512 widely_linear_f32_g4r16x4_gemv_16x1__simde_avx512
#endif
