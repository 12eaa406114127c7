// Naming: ukernels/<isa>_<format>.h holds the register tile of the micro-kernels whose files end
// in __<isa> (here neon_fma), for one weight format (here bf16; neon_fma_mxfp4.h: MXFP4, which
// includes this header and reuses its tile).
//
// The AArch64 NEON (no BF16) register tile of the fused-MoE kernels, written once over a
// weight source (bf16 pair words, or MXFP4 decoded in registers: neon_fma_mxfp4.h), so the
// bf16 and MXFP4 kernels perform the same fp32 operations on the same weight values.
//
// bf16 weights widened to fp32 in registers (one 32-bit word holds the k and k+1 weights of a
// column: `<< 16` gives the first, `& 0xffff0000` the second), A rows pre-widened to fp32, FMA
// by lane; 4 rows x 16 columns. Each C element is one FMA chain in k order for every row count
// (batch-invariant); 1 row (decode) covers 2 panels per call to hide the FMA latency.
#pragma once
#include <arm_neon.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/pack_kpairs.h"
#include "kernels/moe/ukernels/panel_sources.h"
namespace cpukern::moe::neonfma {
namespace {  // internal linkage: compiled per ISA

constexpr int kNR = 16;

// bf16 weights: the panel's 32-bit words [k pair][16 columns].
struct Bf16Src {
  static constexpr int kPairsPerBlock = 0;
  const uint32_t* w;
  const uint32x4_t mask = vdupq_n_u32(0xffff0000u);
  explicit Bf16Src(const void* p) : w(static_cast<const uint32_t*>(p)) {}
  void block(int64_t) {}
  void pair(int64_t kk, float32x4_t* lo, float32x4_t* hi) const {
    const uint32_t* wk = w + kk * kNR;
    CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
      const uint32x4_t v = vld1q_u32(wk + 4 * q);
      lo[q] = vreinterpretq_f32_u32(vshlq_n_u32(v, 16));
      hi[q] = vreinterpretq_f32_u32(vandq_u32(v, mask));
    }
  }
};

// C[M][NP * 16] (= or +=) kh k pairs of A (M rows of stride lda, fp32) x the weights of NP
// panels (src[j], each from a block start). Every C element is one FMA chain in k order, the
// same for every M and NP (batch-invariant); a 1-row GEMV takes 2 panels (8 chains) to hide the
// FMA latency instead of splitting a sum.
template <int M, int NP, class Src>
inline void fma_tile(const float* a, int64_t lda, int64_t kh, Src* src, float* c, int64_t ldc,
                     bool accumulate) {
  constexpr int PB = Src::kPairsPerBlock;
  auto new_block = [&](int64_t kk) {
    if constexpr (PB > 0)
      if (kk % PB == 0)
        CPUKERN_UNROLL for (int j = 0; j < NP; ++j) src[j].block(kk / PB);
  };
  float32x4_t acc[NP][M][4];
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j)
    CPUKERN_UNROLL for (int r = 0; r < M; ++r)
      CPUKERN_UNROLL for (int q = 0; q < 4; ++q)
        acc[j][r][q] = accumulate ? vld1q_f32(c + r * ldc + j * kNR + 4 * q) : vdupq_n_f32(0.0f);
  auto step = [&](int64_t kk, const float32x4_t* av, auto lane_pair) {
    constexpr int L = decltype(lane_pair)::value;
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      float32x4_t lo[4], hi[4];
      src[j].pair(kk, lo, hi);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r)
        CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
          acc[j][r][q] = vfmaq_laneq_f32(acc[j][r][q], lo[q], av[r], 2 * L);
          acc[j][r][q] = vfmaq_laneq_f32(acc[j][r][q], hi[q], av[r], 2 * L + 1);
        }
    }
  };
  int64_t kk = 0;
  for (; kk + 2 <= kh; kk += 2) {
    float32x4_t av[M];
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) av[r] = vld1q_f32(a + r * lda + 2 * kk);
    new_block(kk);
    step(kk, av, std::integral_constant<int, 0>());
    step(kk + 1, av, std::integral_constant<int, 1>());
  }
  if (kk < kh) {  // last pair: the A rows are zero-padded to a multiple of 4
    float32x4_t av[M];
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) av[r] = vld1q_f32(a + r * lda + 2 * kk);
    new_block(kk);
    step(kk, av, std::integral_constant<int, 0>());
  }
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j)
    CPUKERN_UNROLL for (int r = 0; r < M; ++r)
      CPUKERN_UNROLL for (int q = 0; q < 4; ++q)
        vst1q_f32(c + r * ldc + j * kNR + 4 * q, acc[j][r][q]);
}
template <class Src>
struct Tile : KpairsTile<kNR> {
  // One row block (decode): 2 panels per call, so 1 row runs 8 chains.
  static constexpr int kMR = 4, kActW = 4, kNPGemv = 2;
  // K blocks of kKBlock with several row blocks (a panel's block stays in L1 for them all;
  // the decoded MXFP4 prefill uses the same blocks). Blocking never changes a sum.
  static constexpr bool kBlockK = true;
  using A = float;  // rows fp32 [m][round_up(k, 4)]: one vector holds two k pairs
  static int64_t a_stride(int64_t k) { return round_up(k, 4); }
  // Blocks of 4, 3 + 2 where that avoids a 1-row tail (4 chains on one panel): 5 = 3 + 2,
  // 9 = 4 + 3 + 2. Only the speed depends on the split, never the results.
  static int64_t rows(int64_t rem) { return rem <= kMR ? rem : rem == 5 ? 3 : kMR; }
  static constexpr auto pack_a = pack_a_f32<4>;
  template <int M, class WT>
  static void tile(const float* a, int64_t lda, int64_t nk, const WT* w, int64_t panel, int np,
                   float* c, int64_t ldc, bool accumulate, int64_t) {
    const int64_t kh = nk * (Src::kPairsPerBlock ? Src::kPairsPerBlock : 1);
    constexpr int G = M == 1 ? 2 : 1;  // 1 row: two panels per call, 8 independent chains
    panel_groups<G, 1>(np, [&](auto g, int j) {
      auto src = sources<Src>(w + j * panel, panel, std::make_index_sequence<g>());
      fma_tile<M, g>(a, lda, kh, src.data(), c + j * kNR, ldc, accumulate);
    });
  }
};

}  // namespace
}  // namespace cpukern::moe::neonfma
