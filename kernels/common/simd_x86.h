// x86 intrinsics, or SIMDe's portable versions of them when CPUKERN_SIMDE is defined, so
// that an AVX-512 kernel's source can be compiled and tested on any host.
#pragma once

#if defined(CPUKERN_SIMDE)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/fma.h>
#include <cstdint>
// SIMDe has no BMI2; a portable bit-by-bit parallel extract stands in for _pext_u32.
static inline uint32_t cpukern_pext_u32(uint32_t src, uint32_t mask) {
  uint32_t out = 0;
  for (uint32_t bit = 1; mask; bit <<= 1, mask &= mask - 1)
    if (src & mask & (0u - mask)) out |= bit;
  return out;
}
#undef _pext_u32
#define _pext_u32 cpukern_pext_u32
// SIMDe 0.7.4 defines the native alias _mm512_madd_epi16 with 4 arguments
// (`(src, k, a, b)`, a copy of the masked form); the intrinsic takes 2.
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)
#else
// GCC 12's AVX-512 intrinsics start some results from a self-initialised "undefined" vector
// (__Y = __Y); inlined deep into a kernel, each use then warns -W(maybe-)uninitialized at that
// line of the intrinsic header (megabytes for the MXFP4 kernel). Only warnings located in the
// intrinsic headers are silenced: the kernels' own code still warns.
#if defined(__clang__)  // clang knows no -Wmaybe-uninitialized and has no such warnings here
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#endif

#if defined(__AVX512F__) || defined(CPUKERN_SIMDE)
// Every 32-bit lane shifted by an immediate. GCC 12's _mm512_{s,sr}li_epi32 pass an undefined
// vector through and -Wmaybe-uninitialized fires when they are inlined deep into a kernel; the
// maskz form over all 16 lanes compiles to the same vpsrld / vpslld. SIMDe: the plain forms.
#if defined(CPUKERN_SIMDE)
static inline __m512i cpukern_srli_epi32(__m512i v, unsigned n) { return _mm512_srli_epi32(v, n); }
static inline __m512i cpukern_slli_epi32(__m512i v, unsigned n) { return _mm512_slli_epi32(v, n); }
#else
static inline __m512i cpukern_srli_epi32(__m512i v, unsigned n) {
  return _mm512_maskz_srli_epi32(__mmask16(0xFFFF), v, n);
}
static inline __m512i cpukern_slli_epi32(__m512i v, unsigned n) {
  return _mm512_maskz_slli_epi32(__mmask16(0xFFFF), v, n);
}
#endif
#endif
