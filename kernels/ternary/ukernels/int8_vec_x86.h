// What the int8 ternary micro-kernels (q2b.h, b3p5.h) share: the x86 integer vector
// operations, as two traits: Int8x32 (AVX2, ymm) and Int8x64 (AVX-512BW, zmm); and
// Int8Blocks, their block geometry, row grouping, batch split and Ukernel entry. Internal
// linkage: each micro-kernel file compiles its own copy with its ISA's flags.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/simd_x86.h"
#include "kernels/ternary/ukernels/stream_prefetch.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

#if defined(__AVX2__)
struct Int8x32 {
  using V = __m256i;
  static constexpr int kBits = 256;
  static V load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static V zero() { return _mm256_setzero_si256(); }
  static V set1_8(int v) { return _mm256_set1_epi8(char(v)); }
  static V set1_16(int v) { return _mm256_set1_epi16(short(v)); }
  static V and_(V a, V b) { return _mm256_and_si256(a, b); }
  static V srli16(V a, int n) { return _mm256_srli_epi16(a, n); }
  static V add8(V a, V b) { return _mm256_add_epi8(a, b); }
  static V add16(V a, V b) { return _mm256_add_epi16(a, b); }
  static V add32(V a, V b) { return _mm256_add_epi32(a, b); }
  static V srai32(V a, int n) { return _mm256_srai_epi32(a, n); }
  static V maddubs(V a, V b) { return _mm256_maddubs_epi16(a, b); }
  static V madd16(V a, V b) { return _mm256_madd_epi16(a, b); }
  // t = [s > lo] + [s > hi] = |mask1 + mask2|.
  static V trit(V s, V lo, V hi, V) {
    return _mm256_abs_epi8(_mm256_add_epi8(_mm256_cmpgt_epi8(s, lo), _mm256_cmpgt_epi8(s, hi)));
  }
  static int32_t hsum32(V a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
  }
  // The lane sums of a, b, c, d as the 4 lanes of one xmm (wrapping adds).
  static __m128i hsum4(V a, V b, V c, V d) {
    const V ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
    const V cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
    const V s = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  }
};
#endif

#if defined(__AVX512BW__) || defined(CPUKERN_SIMDE)
struct Int8x64 {
  using V = __m512i;
  static constexpr int kBits = 512;
  static V load(const void* p) { return _mm512_loadu_si512(p); }
  static V zero() { return _mm512_setzero_si512(); }
  static V set1_8(int v) { return _mm512_set1_epi8(char(v)); }
  static V set1_16(int v) { return _mm512_set1_epi16(short(v)); }
  static V and_(V a, V b) { return _mm512_and_si512(a, b); }
  static V srli16(V a, int n) { return _mm512_srli_epi16(a, n); }
#if defined(CPUKERN_SIMDE)
  // Wrapping byte adds: SIMDe adds int8 lanes as signed char, where wrapping is undefined
  // behaviour in C (UBSan stops the test), so the SIMDe build adds unsigned bytes instead.
  static V add8(V a, V b) {
    uint8_t x[sizeof(V)], y[sizeof(V)];
    std::memcpy(x, &a, sizeof(V));
    std::memcpy(y, &b, sizeof(V));
    for (size_t i = 0; i < sizeof(V); ++i) x[i] = uint8_t(x[i] + y[i]);
    std::memcpy(&a, x, sizeof(V));
    return a;
  }
#else
  static V add8(V a, V b) { return _mm512_add_epi8(a, b); }
#endif
  static V add16(V a, V b) { return _mm512_add_epi16(a, b); }
  static V add32(V a, V b) { return _mm512_add_epi32(a, b); }
#if defined(CPUKERN_SIMDE)
  // SIMDe 0.7.4 has no _mm512_srai_epi32.
  static V srai32(V a, int n) {
    int32_t x[16];
    std::memcpy(x, &a, sizeof(V));
    for (int32_t& e : x) e >>= n;
    std::memcpy(&a, x, sizeof(V));
    return a;
  }
#else
  static V srai32(V a, int n) { return _mm512_srai_epi32(a, n); }
#endif
  static V maddubs(V a, V b) { return _mm512_maddubs_epi16(a, b); }
  static V madd16(V a, V b) { return _mm512_madd_epi16(a, b); }
#if defined(__AVX512VNNI__) && !defined(CPUKERN_SIMDE)
  // vpdpbusd accumulators as a GCC vector of 16 int32 (cast to __m512i only at the intrinsic):
  // held as __m512i (8 x int64), GCC 12 copied each accumulator to another register around
  // every vpdpbusd.
  typedef int32_t Acc __attribute__((vector_size(64)));
  static Acc dpbusd(Acc c, V u8, V s8) { return (Acc)_mm512_dpbusd_epi32((V)c, u8, s8); }
  static V from_acc(Acc c) { return (V)c; }
#else
  using Acc = V;
  static Acc dpbusd(Acc c, V u8, V s8) { return _mm512_dpbusd_epi32(c, u8, s8); }
  static V from_acc(Acc c) { return c; }
#endif
  // t = [s > lo] + [s > hi] with mask registers.
  static V trit(V s, V lo, V hi, V one) {
    const auto k1 = _mm512_cmpgt_epi8_mask(s, lo), k2 = _mm512_cmpgt_epi8_mask(s, hi);
    const V t = _mm512_maskz_mov_epi8(k1, one);
    return _mm512_mask_add_epi8(t, k2, t, one);
  }
  static int32_t hsum32(V a) {
    alignas(64) int32_t t[16];
    _mm512_store_si512(t, a);
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) s += t[i];
    return s;
  }
  // The lane sums of a, b, c, d as the 4 lanes of one xmm (wrapping adds): per 128-bit lane
  // [a, b, c, d] partial sums, then the four 128-bit lanes added.
  static __m128i hsum4(V a, V b, V c, V d) {
    const V ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const V cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    const V s = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  }
};
#endif

// The frame of an int8 micro-kernel K (CRTP) on Vec: a block is one vector of stored bytes,
// each byte holding kDigits columns, and kI16Blocks blocks are summed in int16 before vpmaddwd
// widens them to int32. K supplies row_bytes(k) and rows_loop<R, NB, DP>(a, b0), which runs
// batch rows [b0, b0 + NB) over all rows, R at a time (row_groups); DP: the VNNI batch-1 kernel.
template <class K, class Vec, int kDigits, bool kVnni>
struct Int8Blocks {
  using VI = typename Vec::V;
  static constexpr int64_t kVB = Vec::kBits / 8;   // stored bytes per block
  static constexpr int64_t kCols = kDigits * kVB;  // columns per block
  static constexpr int64_t kI16Blocks = 8;         // blocks summed in int16 before widening

  static int64_t packed_size(int64_t m, int64_t k) { return m * K::row_bytes(k); }

  // kernel(std::integral_constant<int, n>, r) for rows [r, r + n): n = R while R rows are
  // left, then 1.
  template <int R, class F>
  static void row_groups(int64_t rows, F&& kernel) {
    int64_t r = 0;
    for (; r + R <= rows; r += R) kernel(std::integral_constant<int, R>{}, r);
    for (; r < rows; ++r) kernel(std::integral_constant<int, 1>{}, r);
  }

  // Batch rows 4 at a time (2 rows per kernel); the last 3 or 2 likewise; a single one with 4
  // rows per kernel (VNNI's kernel if kVnni).
  static void run(const I8Args* a) {
    int64_t b = 0;
    for (; b + 4 <= a->batch; b += 4) K::template rows_loop<2, 4>(a, b);
    switch (a->batch - b) {
      case 3: K::template rows_loop<2, 3>(a, b); break;
      case 2: K::template rows_loop<2, 2>(a, b); break;
      case 1: K::template rows_loop<4, 1, kVnni>(a, b); break;
      default: break;
    }
  }

  static constexpr I8Ukernel ukernel(const char* name, const char* layout) {
    return {name, layout, 4, packed_size, K::row_bytes, K::run};
  }
};

}  // namespace
}  // namespace cpukern::ternary
