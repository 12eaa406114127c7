// The x86 VNNI int8 (W8A8) register tile: vpdpbusd, exact int32 sums of M rows x 16 columns,
// on the "qc8wp16x4" weights of int8_generic.h ([k step][16 columns][4 k]: 64 bytes per 4 k of
// a panel, each int32 lane one column's 4 weights). Written once over the vector width V:
// Zmm (AVX512_VNNI, one vector per panel and k step) and Ymm (AVX-VNNI, two).
//
// vpdpbusd multiplies unsigned by signed bytes, so A is stored offset: u = q + 128 in [1, 255]
// (put_a below). Per k step: the panel's 64 weight bytes, per row one broadcast of the row's
// 4 bytes and one vpdpbusd per vector; one more vpdpbusd with 0x01 bytes accumulates the
// columns' weight sums (shared by the rows); at the end sum(q w) = sum(u w) - 128 sum(w).
// vpdpbusd wraps (no saturation), so the int32 sums are exact modulo 2**32, and the true value
// fits in int32 (K <= int8::kMaxK): the subtraction gives it exactly. (The sign trick, |a|
// against sign(w, a), has no vpsignb on zmm; the offset costs one vpdpbusd per k step per
// panel, not per row.)
#pragma once
#include "kernels/common/simd_x86.h"

#include <cstdint>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"

namespace cpukern::moe::vnni {
namespace {  // internal linkage: compiled per ISA

#if defined(__AVX512VNNI__) && !defined(CPUKERN_SIMDE)
// Accumulators as a GCC vector of 16 int32 (cast to __m512i only at the intrinsic), not
// __m512i (8 x int64): held as __m512i, GCC 12 copied each accumulator to another register
// around every vpdpbusd (two vmovdqa per product in the 8-row loop).
typedef int32_t I32x16 __attribute__((vector_size(64)));
struct Zmm {
  using T = I32x16;
  static constexpr int kLanes = 16;
  static T zero() { return T{}; }
  static T set1(int32_t v) { return T{} + v; }
  static T load(const int8_t* p) {
    T v;
    __builtin_memcpy(&v, p, sizeof(v));
    return v;
  }
  static T dpbusd(T acc, T u, T w) {
    return (T)_mm512_dpbusd_epi32((__m512i)acc, (__m512i)u, (__m512i)w);
  }
  static void store_minus_128x(int32_t* p, T c, T sum) {
    const T d = c - (sum << 7);
    __builtin_memcpy(p, &d, sizeof(d));
  }
};
#elif defined(CPUKERN_SIMDE)
struct Zmm {
  using T = __m512i;
  static constexpr int kLanes = 16;
  static T zero() { return _mm512_setzero_si512(); }
  static T set1(int32_t v) { return _mm512_set1_epi32(v); }
  static T load(const int8_t* p) { return _mm512_loadu_si512(p); }
  static T dpbusd(T acc, T u, T w) { return _mm512_dpbusd_epi32(acc, u, w); }
  static void store_minus_128x(int32_t* p, T c, T sum) {
    _mm512_storeu_si512(p, _mm512_sub_epi32(c, cpukern_slli_epi32(sum, 7)));
  }
};
#endif

#if defined(__AVXVNNI__) || defined(CPUKERN_SIMDE)
struct Ymm {
  using T = __m256i;
  static constexpr int kLanes = 8;
  static T zero() { return _mm256_setzero_si256(); }
  static T set1(int32_t v) { return _mm256_set1_epi32(v); }
  static T load(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
#if defined(CPUKERN_SIMDE)
  static T dpbusd(T acc, T u, T w) { return _mm256_dpbusd_epi32(acc, u, w); }
#else
  static T dpbusd(T acc, T u, T w) { return _mm256_dpbusd_avx_epi32(acc, u, w); }
#endif
  static void store_minus_128x(int32_t* p, T c, T sum) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm256_sub_epi32(c, _mm256_slli_epi32(sum, 7)));
  }
};
#endif

// C[M][NP * 16] int32 = ks k steps of A (M rows of stride lda, offset bytes) x NP panels.
// Not inlined: inside the panel loop GCC ran out of general registers for the 8 row offsets
// and reloaded them from the stack and from xmm registers in the k loop (Zen 4, 8 x 16 tile,
// k = 2880: 363 Gop/s inlined, 404 not).
template <class V, int M, int NP>
[[gnu::noinline]] void int8_tile(const uint8_t* a, int64_t lda, int64_t ks, const int8_t* w,
                                 int64_t panel, int32_t* acc, int64_t ldacc) {
  constexpr int NV = 16 / V::kLanes;  // vectors per panel and k step
  typename V::T c[NP][M][NV], sum[NP][NV];
  const typename V::T ones = V::set1(0x01010101);
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int v = 0; v < NV; ++v) {
    sum[j][v] = V::zero();
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) c[j][r][v] = V::zero();
  }
  for (int64_t kk = 0; kk < ks; ++kk) {
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int v = 0; v < NV; ++v) {
      const typename V::T wv = V::load(w + j * panel + kk * 64 + v * 4 * V::kLanes);
      if (v == 0)
        _mm_prefetch(reinterpret_cast<const char*>(w + j * panel + kk * 64) + kInt8PrefetchBytes,
                     _MM_HINT_T0);
      sum[j][v] = V::dpbusd(sum[j][v], ones, wv);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        int32_t quad;
        __builtin_memcpy(&quad, a + r * lda + 4 * kk, 4);
        c[j][r][v] = V::dpbusd(c[j][r][v], V::set1(quad), wv);
      }
    }
  }
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    CPUKERN_UNROLL for (int v = 0; v < NV; ++v)
      V::store_minus_128x(acc + r * ldacc + j * 16 + v * V::kLanes, c[j][r][v], sum[j][v]);
}

// Zmm: 8 rows (8 accumulators + sums + weights + broadcast of 32 zmm); 1-2 rows stream 4 / 2
// panels per call, 3-4 rows 2 (8 chains of vpdpbusd, latency 5). Ymm (16 registers, two per
// row): 4 rows; 1 row streams 2 panels (8 chains with the sums), 2-4 rows 1.
template <class V>
struct Int8Tile : Int8TileDefaults {
  // kActW: the register width (a 16-float vector in a 256-bit build is two registers and
  // makes GCC warn about the AVX-512 ABI, -Wpsabi).
  static constexpr int kMR = V::kLanes == 16 ? 8 : 4, kNR = 16, kKR = 4, kNP = 4, kActW = V::kLanes;
  using A = uint8_t;
  static int64_t a_stride(int64_t k) { return round_up(k, kKR); }
  static int64_t rows(int64_t rem) {
    return rem <= kMR ? rem : rem < 2 * kMR ? (rem + 1) / 2 : kMR;
  }
  static int w_at(int col, int kk) { return col * kKR + kk; }
  // Row r as u = q + 128 (padding: q = 0, u = 128, against zero weights).
  static void put_a(const int8_t* q, int64_t k, int64_t r, uint8_t* rows, int64_t lda) {
    uint8_t* d = rows + r * lda;
    for (int64_t j = 0; j < k; ++j) d[j] = uint8_t(q[j] + 128);
    for (int64_t j = k; j < lda; ++j) d[j] = 128;
  }
  template <int M>
  static void tile(const uint8_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                   int np, int32_t* acc, int64_t ldacc) {
    constexpr int G = V::kLanes == 16 ? (M == 1 ? 4 : M <= 4 ? 2 : 1) : (M == 1 ? 2 : 1);
    panel_groups<G, 1>(np, [&](auto g, int j) {
      int8_tile<V, M, g>(a, lda, ks, w + j * panel, panel, acc + j * 16, ldacc);
    });
  }
};

}  // namespace
}  // namespace cpukern::moe::vnni
