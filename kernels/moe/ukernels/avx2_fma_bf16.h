// Naming: ukernels/<isa>_<format>.h holds the register tile of the micro-kernels whose files end
// in __<isa> (here avx2_fma), for one weight format (bf16, mxfp4; int8: <isa>_int8.h). A
// format's header includes the bf16 one where it reuses its tile.
//
// The AVX2 + FMA register tile of the fused-MoE kernels on bf16 weights, written once over a
// weight source (Src) so that the bf16 kernel and the MXFP4 kernel (avx2_fma_mxfp4.h) perform
// the same fp32 operations on the same weight values in the same order (results equal bit for
// bit on the dequantized weights).
//
// bf16: weights widened to fp32 in registers (one 32-bit word holds the k and k+1 weights of a
// column: `<< 16` gives the first as fp32, `& 0xffff0000` the second), A rows pre-widened to
// fp32 and broadcast, 5 rows x 16 columns of fp32 accumulators (6 rows measured slower: 12
// accumulators + operands exceed the 16 registers and GCC spills). Each C element is one FMA
// chain in k order for every row count (batch-invariant); 1-2 rows (decode) cover 4 or 2
// panels per call instead, 8 independent chains, so the kernel streams weights as a bf16 GEMV
// at memory bandwidth.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/pack_kpairs.h"
#include "kernels/moe/ukernels/panel_sources.h"

namespace cpukern::moe::avx2 {
namespace {  // internal linkage: compiled per ISA

constexpr int kNR = 16;

// The pointer, hidden from the optimiser: a second load of the same weights is then not merged
// with the first, so the odd-k operand comes from `vpand reg, mask, [mem]` and the raw words
// never occupy registers (16 ymm: 2M accumulators + 2 operands + broadcast + mask).
template <class T>
inline const T* launder_ptr(const T* p) {
  asm("" : "+r"(p));
  return p;
}

// bf16 weights: the panel's 32-bit words [k pair][16 columns] (pack_kpairs<16>).
struct Bf16Src {
  static constexpr int kPairsPerBlock = 0;
  static constexpr bool kEvenOdd = false;  // weight vectors in column order
  using FastGemv = void;                   // no decode GEMV of its own (Tile::tile)
  const uint32_t* w;
  __m256i hi_mask = _mm256_set1_epi32(int(0xffff0000u));
  explicit Bf16Src(const void* p) : w(static_cast<const uint32_t*>(p)) {}
  void block(int64_t) {}
  const void* at(int64_t kk) const { return w + kk * kNR; }
  void load(int64_t kk, __m256& l0, __m256& l1, __m256& h0, __m256& h1) const {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kk * kNR));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kk * kNR + 8));
    l0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
    l1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
    h0 = _mm256_castsi256_ps(_mm256_and_si256(w0, hi_mask));
    h1 = _mm256_castsi256_ps(_mm256_and_si256(w1, hi_mask));
  }
  void lo(int64_t kk, __m256& l0, __m256& l1) const {
    const uint32_t* wk = w + kk * kNR;
    l0 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wk)), 16));
    l1 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wk + 8)), 16));
  }
  void hi(int64_t kk, __m256& h0, __m256& h1) const {
    const uint32_t* wq = launder_ptr(w + kk * kNR);
    h0 = _mm256_castsi256_ps(
        _mm256_and_si256(hi_mask, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq))));
    h1 = _mm256_castsi256_ps(
        _mm256_and_si256(hi_mask, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 8))));
  }
};

// Column vectors [0-7], [8-15] -> (even columns [0 2 4 6 | 8 10 12 14], odd columns
// [1 3 5 7 | 9 11 13 15]), the order of the in-lane bf16-word unpacks, and back.
inline void to_even_odd(__m256& x0, __m256& x1) {
  const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256 p0 = _mm256_permutevar8x32_ps(x0, split), p1 = _mm256_permutevar8x32_ps(x1, split);
  x0 = _mm256_permute2f128_ps(p0, p1, 0x20);
  x1 = _mm256_permute2f128_ps(p0, p1, 0x31);
}
inline void from_even_odd(__m256& x0, __m256& x1) {
  const __m256i merge = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256 p0 = _mm256_permute2f128_ps(x0, x1, 0x20), p1 = _mm256_permute2f128_ps(x0, x1, 0x31);
  x0 = _mm256_permutevar8x32_ps(p0, merge);
  x1 = _mm256_permutevar8x32_ps(p1, merge);
}

// C[M][NP * 16] (= or +=) kh k pairs of A (M rows of stride kp) x the weights of NP panels
// (src[j], each from a block start); PF: prefetch pf bytes ahead of the weights.
// Every C element is one FMA chain in k order (c += a[2k] w[2k]; c += a[2k+1] w[2k+1]), the
// same for every M and NP: batch-invariant. The chains are independent across rows and panels,
// so a 1-row GEMV takes 4 panels (8 chains) to hide the FMA latency.
template <int M, int NP, bool PF, class Src>
inline void fma_tile(const float* a, int64_t kp, int64_t kh, Src* src, float* c, int64_t ldc,
                     bool accumulate, int64_t pf) {
  constexpr int PB = Src::kPairsPerBlock;
  __m256 c0[NP][M], c1[NP][M];
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    c0[j][r] = accumulate ? _mm256_loadu_ps(c + r * ldc + j * kNR) : _mm256_setzero_ps();
    c1[j][r] = accumulate ? _mm256_loadu_ps(c + r * ldc + j * kNR + 8) : _mm256_setzero_ps();
    if constexpr (Src::kEvenOdd)
      if (accumulate) to_even_odd(c0[j][r], c1[j][r]);
  }
  for (int64_t kk = 0; kk < kh; ++kk) {
    if constexpr (PB > 0)
      if (kk % PB == 0)
        CPUKERN_UNROLL for (int j = 0; j < NP; ++j) src[j].block(kk / PB);
    if constexpr (PF)
      CPUKERN_UNROLL for (int j = 0; j < NP; ++j)
        _mm_prefetch(static_cast<const char*>(src[j].at(kk)) + pf, _MM_HINT_T0);
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      __m256 l0, l1;
      src[j].lo(kk, l0, l1);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        const __m256 ae = _mm256_broadcast_ss(a + r * kp + 2 * kk);
        c0[j][r] = _mm256_fmadd_ps(ae, l0, c0[j][r]);
        c1[j][r] = _mm256_fmadd_ps(ae, l1, c1[j][r]);
      }
    }
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      __m256 h0, h1;
      src[j].hi(kk, h0, h1);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        const __m256 ao = _mm256_broadcast_ss(a + r * kp + 2 * kk + 1);
        c0[j][r] = _mm256_fmadd_ps(ao, h0, c0[j][r]);
        c1[j][r] = _mm256_fmadd_ps(ao, h1, c1[j][r]);
      }
    }
  }
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    if constexpr (Src::kEvenOdd) from_even_odd(c0[j][r], c1[j][r]);
    _mm256_storeu_ps(c + r * ldc + j * kNR, c0[j][r]);
    _mm256_storeu_ps(c + r * ldc + j * kNR + 8, c1[j][r]);
  }
}

// np panels (stride `panel` W) in calls of G panels, the remainder in calls of G/2, G/4, ...
template <int M, int G, bool PF, class Src, class WT>
inline void fma_panels(const float* a, int64_t kp, int64_t kh, const WT* w, int64_t panel,
                       int np, float* c, int64_t ldc, bool accumulate, int64_t pf) {
  panel_groups<G>(np, [&](auto g, int j) {
    auto src = sources<Src>(w + j * panel, panel, std::make_index_sequence<g>());
    fma_tile<M, g, PF>(a, kp, kh, src.data(), c + j * kNR, ldc, accumulate, pf);
  });
}

// Tile traits over a weight source: the bf16 kernel (Src = Bf16Src, k step = a k pair) and the
// MXFP4 kernel (avx2_fma_mxfp4.h: Mxfp4Src, k step = a 32-k block) share everything else.
template <class Src>
struct Tile : KpairsTile<kNR> {
  // One row block (decode): 4 panels per call, so 1 row runs 8 chains and 2 rows 8.
  static constexpr int kMR = 5, kActW = 8, kNPGemv = 4;
  // Decode: bf16 at T=1 1.1x faster on Zen 5 with it (MXFP4 1.04x: decode-bound).
  static constexpr int kPrefetchGemv = 2048;
  static constexpr bool kBlockK = true;
  using A = float;  // rows pre-widened to fp32
  // Row blocks of 5 (10 accumulators; 6 rows spill on 16 registers), 3 or 4 where that avoids
  // a 1- or 2-row tail (4 chains: latency-bound on one panel): 6 = 3 + 3, 7 = 4 + 3,
  // 8 = 4 + 4, 11 = 5 + 3 + 3. Only the speed depends on the split, never the results.
  static int64_t rows(int64_t rem) {
    return rem <= kMR ? rem : rem == 6 ? 3 : (rem == 7 || rem == 8) ? 4 : kMR;
  }
  static constexpr auto pack_a = pack_a_f32<kKR>;
  template <int M, class WT>
  static void tile(const float* a, int64_t lda, int64_t nk, const WT* w, int64_t panel, int np,
                   float* c, int64_t ldc, bool accumulate, int64_t pf) {
    // nk k steps: k pairs (bf16) or blocks of 16 k pairs (MXFP4).
    const int64_t kh = nk * (Src::kPairsPerBlock ? Src::kPairsPerBlock : 1);
    constexpr int G = M == 1 ? 4 : M == 2 ? 2 : 1;  // panels per call: 8 chains from 1-2 rows
    // A source with a decode GEMV of its own (Src::FastGemv: the MXFP4 fast path,
    // avx2_fma_mxfp4.h) runs the calls whose rows it admits.
    if constexpr (!std::is_void_v<typename Src::FastGemv>) {
      using F = typename Src::FastGemv;
      const auto* wq = reinterpret_cast<const uint8_t*>(w);
      if (F::rows_ok(a, lda, M, 2 * kh)) {
        if (pf)
          F::template panels<M, G, true>(a, lda, nk, wq, panel, np, c, ldc, accumulate, pf);
        else
          F::template panels<M, G, false>(a, lda, nk, wq, panel, np, c, ldc, accumulate, 0);
        return;
      }
    }
    if (pf)
      fma_panels<M, G, true, Src>(a, lda, kh, w, panel, np, c, ldc, accumulate, pf);
    else
      fma_panels<M, G, false, Src>(a, lda, kh, w, panel, np, c, ldc, accumulate, 0);
  }
};

}  // namespace
}  // namespace cpukern::moe::avx2
