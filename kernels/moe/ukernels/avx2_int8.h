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

struct Int8Tile : Int8TileDefaults {
  static constexpr int kMR = 4, kNR = 16, kKR = 2, kNP = 1, kActW = 8;
  using A = int16_t;
  static int64_t a_stride(int64_t k) { return round_up(k, kKR); }
  // 4 rows (8 accumulators + 2 weight vectors + a broadcast: 11 of 16 registers); 5..8 rows
  // as two near-equal blocks. Only the speed depends on the split.
  static int64_t rows(int64_t rem) {
    return rem <= kMR ? rem : rem < 2 * kMR ? (rem + 1) / 2 : kMR;
  }
  static int w_at(int col, int kk) { return col * kKR + kk; }
  template <int M>
  static void tile(const int16_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t, int,
                   int32_t* acc, int64_t ldacc) {
    __m256i c0[M], c1[M];
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) c0[r] = c1[r] = _mm256_setzero_si256();
    for (int64_t kk = 0; kk < ks; ++kk) {
      const int8_t* wk = w + kk * kNR * kKR;
      const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wk)));
      const __m256i w1 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wk + 16)));
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        int32_t pair;
        __builtin_memcpy(&pair, a + r * lda + 2 * kk, 4);
        const __m256i ap = _mm256_set1_epi32(pair);
        c0[r] = _mm256_add_epi32(c0[r], _mm256_madd_epi16(ap, w0));
        c1[r] = _mm256_add_epi32(c1[r], _mm256_madd_epi16(ap, w1));
      }
    }
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * ldacc), c0[r]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + r * ldacc + 8), c1[r]);
    }
  }
};

}  // namespace
}  // namespace cpukern::moe::avx2
