// The x86 integer vector operations shared by the int8 ternary micro-kernels (q2b_impl.h,
// b3p5_impl.h) at INT8_VEC_BITS = 256 (AVX2, ymm) or 512 (AVX-512BW, zmm). Internal linkage:
// each micro-kernel file compiles its own copy with its ISA's flags.
#pragma once
#include <cstdint>

#include "kernels/common/simd_x86.h"
#include "kernels/ternary/ukernels/stream_prefetch.h"

#if INT8_VEC_BITS != 256 && INT8_VEC_BITS != 512
#error "define INT8_VEC_BITS (256 or 512) before including int8_vec_x86.h"
#endif

namespace cpukern::ternary {
namespace {

#if INT8_VEC_BITS == 512
using VI = __m512i;
inline VI v_load(const void* p) { return _mm512_loadu_si512(p); }
inline VI v_zero() { return _mm512_setzero_si512(); }
inline VI v_set1_8(int v) { return _mm512_set1_epi8(char(v)); }
inline VI v_set1_16(int v) { return _mm512_set1_epi16(short(v)); }
inline VI v_add16(VI a, VI b) { return _mm512_add_epi16(a, b); }
inline VI v_add32(VI a, VI b) { return _mm512_add_epi32(a, b); }
inline VI v_maddubs(VI a, VI b) { return _mm512_maddubs_epi16(a, b); }
inline VI v_madd16(VI a, VI b) { return _mm512_madd_epi16(a, b); }
inline int32_t v_hsum32(VI a) {
  alignas(64) int32_t t[16];
  _mm512_store_si512(t, a);
  int32_t s = 0;
  for (int i = 0; i < 16; ++i) s += t[i];
  return s;
}
#else
using VI = __m256i;
inline VI v_load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline VI v_zero() { return _mm256_setzero_si256(); }
inline VI v_set1_8(int v) { return _mm256_set1_epi8(char(v)); }
inline VI v_set1_16(int v) { return _mm256_set1_epi16(short(v)); }
inline VI v_add16(VI a, VI b) { return _mm256_add_epi16(a, b); }
inline VI v_add32(VI a, VI b) { return _mm256_add_epi32(a, b); }
inline VI v_maddubs(VI a, VI b) { return _mm256_maddubs_epi16(a, b); }
inline VI v_madd16(VI a, VI b) { return _mm256_madd_epi16(a, b); }
inline int32_t v_hsum32(VI a) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
#endif

}  // namespace
}  // namespace cpukern::ternary
