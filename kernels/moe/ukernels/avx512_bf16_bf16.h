// Naming: ukernels/<isa>_<format>.h holds the register tile of the micro-kernels whose files end
// in __<isa> (here avx512_bf16), for one weight format (here bf16; avx512_bf16_mxfp4.h: MXFP4,
// which includes this header and reuses its tile).
//
// The AVX-512 BF16 register tile of the fused-MoE kernels (vdpbf16ps), written once over a
// weight source (bf16 pair words, or MXFP4 decoded in registers to the same words:
// avx512_bf16_mxfp4.h), so the two kernels compute the same operations on the same bf16
// operands.
//
// Each 32-bit lane of a weight vector is the pair (w[col][k], w[col][k+1]); the matching A pair
// is broadcast, and one instruction accumulates both products into the column's fp32 lane.
// 8 rows x 32 columns (16 zmm accumulators). Each C element is one chain in k-pair order for
// every row count (batch-invariant); up to 4 rows (decode) cover 2-4 panels per call instead,
// for as many independent chains.
#pragma once
#include "kernels/common/simd_x86.h"

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/pack_kpairs.h"
#include "kernels/moe/ukernels/panel_sources.h"

namespace cpukern::moe::avx512bf16 {
namespace {  // internal linkage: compiled per ISA

constexpr int kNR = 32;

// A rows stay bf16, [m][kp], zero past k.
constexpr auto pack_a = pack_a_bf16<2, 1>;

inline __m512 dp(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}
inline __m512i bcast_pair(const bf16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
// bf16 weights: the panel's 32-bit words [k pair][32 columns].
struct Bf16Src {
  static constexpr int kPairsPerBlock = 0;
  using FastGemv = void;  // no decode GEMV of its own (Tile::tile)
  const uint32_t* w;
  explicit Bf16Src(const void* p) : w(static_cast<const uint32_t*>(p)) {}
  void block(int64_t) {}
  const char* at(int64_t kk) const { return reinterpret_cast<const char*>(w + kk * kNR); }
  void pair(int64_t kk, __m512i& w0, __m512i& w1) const {
    w0 = _mm512_loadu_si512(w + kk * kNR);
    w1 = _mm512_loadu_si512(w + kk * kNR + 16);
  }
};

// C[M][NP * 32] (= or +=) kh k pairs of A (M rows of stride kp, bf16 pairs) x the weights of
// NP panels (src[j], each from a block start); pf > 0: prefetch the weights pf bytes ahead (the
// next K block). Every C element is one vdpbf16ps chain in k-pair order, the same for every M
// and NP (batch-invariant); the chains are independent across rows and panels, so few rows
// take several panels per call instead of splitting a sum.
template <int M, int NP, class Src>
inline void dp_tile(const bf16_t* a, int64_t kp, int64_t kh, Src* src, float* c, int64_t ldc,
                    bool accumulate, int64_t pf) {
  constexpr int PB = Src::kPairsPerBlock;
  __m512 c0[NP][M], c1[NP][M];
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    c0[j][r] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * kNR) : _mm512_setzero_ps();
    c1[j][r] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * kNR + 16) : _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < kh; ++kk) {
    if constexpr (PB > 0)
      if (kk % PB == 0)
        CPUKERN_UNROLL for (int j = 0; j < NP; ++j) src[j].block(kk / PB);
    if (pf) {
      CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
        const char* q = src[j].at(kk) + pf;
        _mm_prefetch(q, _MM_HINT_T0);
        _mm_prefetch(q + 64, _MM_HINT_T0);
      }
    }
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      __m512i w0, w1;
      src[j].pair(kk, w0, w1);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        const __m512i av = bcast_pair(a + r * kp + 2 * kk);
        c0[j][r] = dp(c0[j][r], av, w0);
        c1[j][r] = dp(c1[j][r], av, w1);
      }
    }
  }
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    _mm512_storeu_ps(c + r * ldc + j * kNR, c0[j][r]);
    _mm512_storeu_ps(c + r * ldc + j * kNR + 16, c1[j][r]);
  }
}
// np panels (stride `panel` W) in calls of G panels, the remainder in calls of G/2, G/4, ...
template <int M, int G, class Src, class WT>
inline void dp_panels(const bf16_t* a, int64_t kp, int64_t kh, const WT* w, int64_t panel,
                      int np, float* c, int64_t ldc, bool accumulate, int64_t pf) {
  panel_groups<G>(np, [&](auto g, int j) {
    auto src = sources<Src>(w + j * panel, panel, std::make_index_sequence<g>());
    dp_tile<M, g>(a, kp, kh, src.data(), c + j * kNR, ldc, accumulate, pf);
  });
}

template <class Src>
struct Tile : KpairsTile<kNR> {
  // One row block (decode): up to 4 panels per call (G below).
  static constexpr int kMR = 8, kActW = 16, kNPGemv = 4;
  // Decode prefetch: MXFP4 at T=1 1.2-1.3x faster on Zen 5 with it; bf16 without it (Zen 4,
  // 4096x2880 cold, 1 thread, medians of 3 alternating runs: 1.06x / 1.17x / 1.25x faster at
  // T = 1 / 2 / 4, 88-96% of the read probe; Zen 5: at the bandwidth either way).
  static constexpr int kPrefetchGemv = std::is_same_v<Src, Bf16Src> ? 0 : 2048;
  static constexpr bool kBlockK = true;
  using A = bf16_t;
  // Equal row blocks of at most kMR (9 = 5 + 4, not 8 + 1).
  static int64_t rows(int64_t rem) {
    const int64_t nb = (rem + kMR - 1) / kMR;
    return (rem + nb - 1) / nb;
  }
  static constexpr auto pack_a = avx512bf16::pack_a;
  template <int M, class WT>
  static void tile(const bf16_t* a, int64_t lda, int64_t nk, const WT* w, int64_t panel, int np,
                   float* c, int64_t ldc, bool accumulate, int64_t pf) {
    const int64_t kh = nk * (Src::kPairsPerBlock ? Src::kPairsPerBlock : 1);
    // Panels per call: 8-16 independent chains (2 per row and panel) for every row count.
    constexpr int G = M <= 2 ? 4 : M <= 4 ? 2 : 1;
    // A source with a decode GEMV of its own (Src::FastGemv: the MXFP4 fast path,
    // avx512_bf16_mxfp4.h) runs the calls whose rows it admits.
    if constexpr (!std::is_void_v<typename Src::FastGemv>)
      if (Src::FastGemv::rows_ok(a, lda, M, 2 * kh))
        return Src::FastGemv::template panels<M, G>(a, lda, nk,
                                                    reinterpret_cast<const uint8_t*>(w), panel,
                                                    np, c, ldc, accumulate, pf);
    dp_panels<M, G, Src>(a, lda, kh, w, panel, np, c, ldc, accumulate, pf);
  }
};

}  // namespace
}  // namespace cpukern::moe::avx512bf16
