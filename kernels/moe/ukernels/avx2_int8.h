// The AVX2 int8 (W8A8) register tile: 4 rows x 16 columns of exact int32 sums.
//
// Layout "qc8wp16x2": per panel of 16 columns, per k pair, the 16 columns' (k, k+1) int8
// weights ([k pair][16 columns][2], 32 bytes); A rows widened to int16 at pack time
// ([m][round_up(k, 2)]). Per k pair: vpmovsxbw widens the 16 columns' pairs to int16 (two
// loads, shared by every row), and per row one vpbroadcastd of the row's (a_k, a_k+1) pair and
// two vpmaddwd (a_k w_k + a_k+1 w_k+1 per column, exact in int32) + two vpaddd.
// Why not vpmaddubsw: it multiplies u8 by s8 and saturates its int16 pair sums, so signed
// activations need the sign trick (|a| against sign(w, a)), one vpsignb per (row, weight
// vector) on top of vpmaddubsw + vpmaddwd(ones) + vpaddd: the same 4 ops per row and 32 products
// as here, plus |w| and the signs to produce. vpmovsxbw + vpmaddwd is exact by construction
// (no saturation, no offsets or column sums) and its widening is amortised over the rows.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"

namespace cpukern::moe::avx2 {
namespace {  // internal linkage: compiled per ISA

// C[M][NP * 16] int32 = ks k pairs of A (M rows of stride lda) x NP panels (stride panel bytes).
template <int M, int NP>
inline void int8_tile(const int16_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                      int32_t* acc, int64_t ldacc) {
  __m256i c0[NP][M], c1[NP][M];
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    c0[j][r] = c1[j][r] = _mm256_setzero_si256();
  for (int64_t kk = 0; kk < ks; ++kk) {
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      const int8_t* wk = w + j * panel + kk * 32;
      if (kk % 2 == 0)  // one prefetch per 64-byte line
        _mm_prefetch(reinterpret_cast<const char*>(wk) + kInt8PrefetchBytes, _MM_HINT_T0);
      const __m256i w0 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wk)));
      const __m256i w1 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wk + 16)));
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        int32_t pair;
        __builtin_memcpy(&pair, a + r * lda + 2 * kk, 4);
        const __m256i ap = _mm256_set1_epi32(pair);
        c0[j][r] = _mm256_add_epi32(c0[j][r], _mm256_madd_epi16(ap, w0));
        c1[j][r] = _mm256_add_epi32(c1[j][r], _mm256_madd_epi16(ap, w1));
      }
    }
  }
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * ldacc + j * 16), c0[j][r]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * ldacc + j * 16 + 8), c1[j][r]);
  }
}

struct Int8Tile : Int8TileDefaults {
  // Up to 4 panels per call: a 1-row GEMV streams 4 panels at once (one stream measured 16
  // GB/s on Zen 3, half the memory's rate; 4 streams keep the prefetchers busy) and 2 rows
  // take 2 panels; 3-4 rows one panel at a time (8 accumulators).
  static constexpr int kMR = 4, kNR = 16, kKR = 2, kNP = 4, kActW = 8;
  using A = int16_t;
  static int64_t a_stride(int64_t k) { return round_up(k, kKR); }
  // 4 rows (8 accumulators + 2 weight vectors + a broadcast: 11 of 16 registers); 5..7 rows
  // as two near-equal blocks. Only the speed depends on the split.
  static int64_t rows(int64_t rem) {
    return rem <= kMR ? rem : rem < 2 * kMR ? (rem + 1) / 2 : kMR;
  }
  static int w_at(int col, int kk) { return col * kKR + kk; }
  template <int M>
  static void tile(const int16_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                   int np, int32_t* acc, int64_t ldacc) {
    constexpr int G = M == 1 ? 4 : M == 2 ? 2 : 1;  // panels per register tile
    panel_groups<G, 1>(np, [&](auto g, int j) {
      int8_tile<M, g>(a, lda, ks, w + j * panel, panel, acc + j * 16, ldacc);
    });
  }
};

}  // namespace
}  // namespace cpukern::moe::avx2
