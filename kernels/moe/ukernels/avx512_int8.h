// The AVX-512 (F/BW, no VNNI) int8 (W8A8) register tile: exact int32 sums of 8 rows x 16
// columns on the VNNI tile's "qc8wp16x4" weights (vnni_int8.h: [k step][16 columns][4 k], 64
// bytes per panel and k step), so every AVX-512 row packs int8 experts into the same bytes.
//
// Per k step and panel, vpmovsxbw widens the 64 weight bytes to two zmm of int16 (columns 0-7,
// 8-15; 32-bit lane 2c holds column c's (w0, w1), lane 2c + 1 its (w2, w3)); per row one
// vpbroadcastq of the row's 4 activations (stored int16 by put_a) and per vector one vpmaddwd
// (a0 w0 + a1 w1, a2 w2 + a3 w3: |.| <= 2 * 127 * 127, exact in int32) and one vpaddd. At the
// end the two lanes of each column are added (a 64-bit shift and a vpaddd per vector, one
// vpermt2d per row and panel). The sums are exact integers (K <= int8::kMaxK), so the split
// into lanes changes no bit.
// Why not vpdpbusd emulated by vpmaddubsw + vpmaddwd: vpmaddubsw multiplies u8 by s8 and
// saturates its int16 pair sums; the VNNI tile's offset activations (u = q + 128 in [1, 255])
// against weights in [-127, 127] reach 2 * 255 * 127 = 64770 > 32767, so it would saturate.
// Signed activations need the sign trick instead (|a| against sign(w, a): at most 2 * 127 * 127
// = 32258, no saturation), and vpsignb has no zmm form (a masked vpsubb per row and vector
// would replace it). That costs two multiplies per row and 64 products (vpmaddubsw, vpmaddwd
// with ones) like the two vpmaddwd here, plus the sign fixes; the widening here is shared by
// the rows and exact by construction.
#pragma once
#include "kernels/common/simd_x86.h"

#include <cstdint>
#include <cstring>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"

namespace cpukern::moe::avx512int8 {
namespace {  // internal linkage: compiled per ISA

// Accumulators as a vector of 16 int32, not __m512i (8 x int64): with __m512i GCC 12 kept
// each accumulator in one register and added into another, one copy per add in the loop.
typedef int32_t I32x16 __attribute__((vector_size(64)));
inline I32x16 i32x16(__m512i v) {
  I32x16 r;
  std::memcpy(&r, &v, sizeof(r));
  return r;
}
inline __m512i m512i(I32x16 v) {
  __m512i r;
  std::memcpy(&r, &v, sizeof(r));
  return r;
}

// acc[M][NP * 16] int32 = ks k steps of A (M rows of stride lda, int16) x NP panels (stride
// panel bytes).
template <int M, int NP>
inline void int8_tile(const int16_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                      int32_t* acc, int64_t ldacc) {
  I32x16 c0[NP][M], c1[NP][M];
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    c0[j][r] = c1[j][r] = I32x16{};
  for (int64_t kk = 0; kk < ks; ++kk) {
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      const int8_t* wk = w + j * panel + kk * 64;
      _mm_prefetch(reinterpret_cast<const char*>(wk) + kInt8PrefetchBytes, _MM_HINT_T0);
      const __m512i w0 =
          _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wk)));
      const __m512i w1 =
          _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wk + 32)));
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        int64_t quad;  // the row's 4 int16 activations of this k step
        std::memcpy(&quad, a + r * lda + 4 * kk, 8);
        const __m512i av = _mm512_set1_epi64(quad);
        c0[j][r] += i32x16(_mm512_madd_epi16(av, w0));
        c1[j][r] += i32x16(_mm512_madd_epi16(av, w1));
      }
    }
  }
  // Column c's sum: lanes 2c and 2c + 1 of c0 (c < 8) or c1 (c >= 8), added in the even lane
  // (a 64-bit shift and an add), then the even lanes of both gathered.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    const __m512i x0 = m512i(c0[j][r]), x1 = m512i(c1[j][r]);
    const __m512i s0 = _mm512_add_epi32(x0, _mm512_srli_epi64(x0, 32));
    const __m512i s1 = _mm512_add_epi32(x1, _mm512_srli_epi64(x1, 32));
    _mm512_storeu_si512(acc + r * ldacc + j * 16, _mm512_permutex2var_epi32(s0, even, s1));
  }
}

// 8 rows: 16 accumulators + 2 weight vectors + a broadcast of the 32 registers. 1 row streams
// 4 panels per call, 2-4 rows 2 (the vnni tile's split).
struct Int8Tile : Int8TileDefaults {
  static constexpr int kMR = 8, kNR = 16, kKR = 4, kNP = 4, kActW = 16;
  using A = int16_t;  // q widened at pack time (Int8TileDefaults::put_a), zero past k
  static int64_t a_stride(int64_t k) { return round_up(k, kKR); }
  static int64_t rows(int64_t rem) {
    return rem <= kMR ? rem : rem < 2 * kMR ? (rem + 1) / 2 : kMR;
  }
  static int w_at(int col, int kk) { return col * kKR + kk; }  // vnni_int8.h's order
  template <int M>
  static void tile(const int16_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                   int np, int32_t* acc, int64_t ldacc) {
    constexpr int G = M == 1 ? 4 : M <= 4 ? 2 : 1;
    panel_groups<G, 1>(np, [&](auto g, int j) {
      int8_tile<M, g>(a, lda, ks, w + j * panel, panel, acc + j * 16, ldacc);
    });
  }
};

}  // namespace
}  // namespace cpukern::moe::avx512int8
