// The AArch64 SDOT (FEAT_DotProd) int8 (W8A8) micro-kernel: the int8 column of the
// neon_dotprod row (Neoverse N1 / Graviton2 class: dotprod, no BF16 / I8MM).
//
// vdotq_laneq_s32(acc, w, a, L): acc[c] += sum of 4 int8 products of w's lane c (column c's 4 k)
// and a's lane L (4 k of one row): 16 multiply-adds, exact int32 sums (int8::kMaxK).
// Layout "qc8wp16x4" (int8_generic.h's, the same packer): per k step of 4 k one 64-byte
// vector quad, each 16 bytes 4 columns x 4 k. A row-major, stride padded to 16 k so that one
// 16-byte load serves 4 k steps (one lane each) and the last, ragged group stays in bounds.
// Tile: 4 rows x 16 columns (16 accumulators); 2 rows take 2 panels, 1 row 4 (16 chains).
#include <arm_neon.h>

#include <cstdint>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {
namespace {

// One k step: lane L of each row's A vector against the step's weight vectors of NJ / 4
// panels (ws: the first panel's step).
template <int L, int M, int NJ>
inline void sdot_step(int32x4_t (&c)[M][NJ], const int8x16_t (&av)[M], const int8_t* ws,
                      int64_t panel) {
  CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) {
    const int8x16_t wv = vld1q_s8(ws + (j / 4) * panel + (j % 4) * 16);
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) c[r][j] = vdotq_laneq_s32(c[r][j], wv, av[r], L);
  }
}

// acc[M][NP * 16] int32 = ks k steps of M rows x NP panels.
template <int M, int NP>
inline void sdot_tile(const int8_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                      int32_t* acc, int64_t ldacc) {
  constexpr int NJ = 4 * NP;
  int32x4_t c[M][NJ];
  CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) c[r][j] = vdupq_n_s32(0);
  int8x16_t av[M];
  int64_t s = 0;
  for (; s + 4 <= ks; s += 4) {
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) av[r] = vld1q_s8(a + r * lda + 4 * s);
    const int8_t* ws = w + s * 64;
    sdot_step<0>(c, av, ws, panel);
    sdot_step<1>(c, av, ws + 64, panel);
    sdot_step<2>(c, av, ws + 128, panel);
    sdot_step<3>(c, av, ws + 192, panel);
  }
  if (s < ks) {  // 1-3 steps left
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) av[r] = vld1q_s8(a + r * lda + 4 * s);
    const int8_t* ws = w + s * 64;
    sdot_step<0>(c, av, ws, panel);
    if (s + 1 < ks) sdot_step<1>(c, av, ws + 64, panel);
    if (s + 2 < ks) sdot_step<2>(c, av, ws + 128, panel);
  }
  CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) vst1q_s32(acc + r * ldacc + 4 * j, c[r][j]);
}

struct Tile : Int8TileDefaults {
  static constexpr int kMR = 4, kNR = 16, kKR = 4, kNP = 4, kActW = 4;
  using A = int8_t;
  static int64_t a_stride(int64_t k) { return round_up(k, 16); }
  static int64_t rows(int64_t rem) { return rem < kMR ? rem : kMR; }
  static int w_at(int col, int kk) { return col * kKR + kk; }
  template <int M>
  static void tile(const int8_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                   int np, int32_t* acc, int64_t ldacc) {
    constexpr int G = M == 1 ? 4 : M == 2 ? 2 : 1;  // panels per register tile
    panel_groups<G, 1>(np, [&](auto g, int j) {
      sdot_tile<M, g>(a, lda, ks, w + j * panel, panel, acc + j * 16, ldacc);
    });
  }
};

}  // namespace

const Ukernel moe_gemm_f32_qd8_qc8wp16x4_4x16__neon_dotprod =
    make_ukernel<Tile>("moe_gemm_f32_qd8_qc8wp16x4_4x16__neon_dotprod", "qc8wp16x4");

}  // namespace cpukern::moe
