// The AVX-512 VNNI int8 (W8A8) register tile: vpdpbusd, 8 rows x 16 columns of exact int32
// sums, on the "qc8wp16x4" weights of int8_generic.h ([k step][16 columns][4 k]: one zmm per
// 4 k of a panel, each int32 lane one column's 4 weights).
//
// vpdpbusd multiplies unsigned by signed bytes, so A is stored offset: u = q + 128 in [1, 255]
// (put_a below). Per k step: one load of the panel's 64 weight bytes, per row one broadcast of
// the row's 4 bytes and one vpdpbusd; one more vpdpbusd with 0x01 bytes accumulates the
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

namespace cpukern::moe::avx512vnni {
namespace {  // internal linkage: compiled per ISA

// C[M][NP * 16] int32 = ks k steps of A (M rows of stride lda, offset bytes) x NP panels.
template <int M, int NP>
inline void int8_tile(const uint8_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                      int32_t* acc, int64_t ldacc) {
  __m512i c[NP][M], sum[NP];
  const __m512i ones = _mm512_set1_epi8(1);
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
    sum[j] = _mm512_setzero_si512();
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) c[j][r] = _mm512_setzero_si512();
  }
  for (int64_t kk = 0; kk < ks; ++kk) {
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      const __m512i wv = _mm512_loadu_si512(w + j * panel + kk * 64);
      sum[j] = _mm512_dpbusd_epi32(sum[j], ones, wv);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        int32_t quad;
        __builtin_memcpy(&quad, a + r * lda + 4 * kk, 4);
        c[j][r] = _mm512_dpbusd_epi32(c[j][r], _mm512_set1_epi32(quad), wv);
      }
    }
  }
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
    const __m512i off = _mm512_slli_epi32(sum[j], 7);  // 128 * sum(w), modulo 2**32
    CPUKERN_UNROLL for (int r = 0; r < M; ++r)
      _mm512_storeu_si512(acc + r * ldacc + j * 16, _mm512_sub_epi32(c[j][r], off));
  }
}

struct Int8Tile : Int8TileDefaults {
  // 8 rows (8 accumulators + sums + weights + broadcast of 32 zmm); 1-2 rows stream 4 / 2
  // panels per call, 3-4 rows 2 (8 chains of vpdpbusd, latency 5).
  static constexpr int kMR = 8, kNR = 16, kKR = 4, kNP = 4, kActW = 16;
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
    constexpr int G = M == 1 ? 4 : M <= 4 ? 2 : 1;  // panels per register tile
    int j = 0;
    for (; j + G <= np; j += G)
      int8_tile<M, G>(a, lda, ks, w + j * panel, panel, acc + j * 16, ldacc);
    for (; j < np; ++j) int8_tile<M, 1>(a, lda, ks, w + j * panel, panel, acc + j * 16, ldacc);
  }
};

}  // namespace
}  // namespace cpukern::moe::avx512vnni
