// The AVX-512F vector traits of the g4r16x4 lookup kernels (lookup_impl.h): 16 rows per
// zmm, 4-column groups, 16-entry subset-sum tables looked up with vpermps (bits 0..3 of
// each index lane). Needs only AVX-512F. Compiles natively or against SIMDe (CPUKERN_SIMDE);
// internal linkage, since both builds exist in one test binary.
#pragma once
#include "kernels/widely_linear/ukernels/avx512.h"
#include "kernels/widely_linear/ukernels/lookup_impl.h"
#include "kernels/widely_linear/ukernels/lookup_layout.h"
#include "kernels/widely_linear/ukernels/signed_impl.h"

namespace cpukern::widely_linear {
namespace {

struct G4R16Avx512 {
  using vec = __m512;
  using ivec = __m512i;
  static constexpr int kR = lookup::kG4R16.R, kG = lookup::kG4R16.G, kK = lookup::kG4R16.K;
  static constexpr int kNegShift = lookup::kG4R16.neg_shift, kE = 1 << kG, kAccRegs = 16;
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
  // signed_impl.h: byte offset 64 * (b3(pos) + 2 b3(neg)) of the group at bit `n` per lane
  // (vpermd reads bits 0..3 of each index lane).
  static constexpr int kLogR = 4;
  template <int n>
  static CPUKERN_WL_INLINE ivec code_off(ivec w) {
    const ivec t1 = _mm512_setr_epi32(0, 64, 192, 256, 576, 640, 768, 832, 1728, 1792, 1920,
                                      1984, 2304, 2368, 2496, 2560);
    const ivec t2 = _mm512_setr_epi32(0, 128, 384, 512, 1152, 1280, 1536, 1664, 3456, 3584,
                                      3840, 3968, 4608, 4736, 4992, 5120);
    return _mm512_add_epi32(_mm512_permutexvar_epi32(shift<n>(w), t1),
                            _mm512_permutexvar_epi32(shift<kNegShift + n>(w), t2));
  }
  // d[0..16) = a[0..16) - b[0..16).
  static CPUKERN_WL_INLINE void sub16(float* d, const float* a, const float* b) {
    _mm512_store_ps(d, _mm512_sub_ps(_mm512_load_ps(a), _mm512_load_ps(b)));
  }
  static CPUKERN_WL_INLINE void store_i(int32_t* p, ivec v) {
    _mm512_store_si512(reinterpret_cast<void*>(p), v);
  }
};

}  // namespace
}  // namespace cpukern::widely_linear

