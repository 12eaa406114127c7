// The AArch64 SMMLA (FEAT_I8MM) int8 (W8A8) micro-kernel: the int8 column of the neon_bf16
// rows (built in their library: FEAT_BF16 and FEAT_I8MM come together, see isa.h).
//
// vmmlaq_s32(acc, a, b): acc (2x2 int32) += A (2x8 int8) * B (8x2 int8), a = 8 k of row 0 then
// 8 k of row 1, b = 8 k of column 0 then 8 k of column 1; acc = [r0c0 r0c1 r1c0 r1c1], like
// BFMMLA's. 32 multiply-adds per instruction, exact int32 sums (|acc| < 2**31: int8::kMaxK).
//
// Layout "qc8wp8x8": per panel of 8 columns, per k step of 8 k, the 4 column pairs' operands
// ([k step][4 pairs][2 columns][8 k]); A in row pairs ([k step][2 rows][8 k] per pair, put_a).
// Tile: 8 rows x 8 columns (4 row pairs x 4 column pairs, 16 accumulators); blocks of 3-4 rows
// take 2 row pairs x 2 panels, 1-2 rows 1 row pair x 4 panels (16 independent chains each;
// SMMLA: latency 3 and 2 (N2) or 4 (V1/V2) pipes in llvm-mca 19's models, 12 chains needed).
// A single row wastes half of each SMMLA: 16 useful multiply-adds, as many as one SDOT.
#include <arm_neon.h>

#include <cstdint>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {
namespace {

// acc[2 RP rows][NP * 8 columns] int32 = ks k steps of RP row pairs x NP panels.
template <int RP, int NP>
inline void smmla_tile(const int8_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                       int32_t* acc, int64_t ldacc) {
  constexpr int NJ = 4 * NP;  // column pairs
  int32x4_t c[RP][NJ];
  CPUKERN_UNROLL for (int q = 0; q < RP; ++q)
    CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) c[q][j] = vdupq_n_s32(0);
  for (int64_t s = 0; s < ks; ++s) {
    int8x16_t av[RP];
    CPUKERN_UNROLL for (int q = 0; q < RP; ++q) av[q] = vld1q_s8(a + 2 * q * lda + 16 * s);
    CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) {
      const int8x16_t b = vld1q_s8(w + (j / 4) * panel + s * 64 + (j % 4) * 16);
      CPUKERN_UNROLL for (int q = 0; q < RP; ++q) c[q][j] = vmmlaq_s32(c[q][j], av[q], b);
    }
  }
  // Two column pairs -> 4 columns of each row of the pair (zip of the 64-bit halves).
  CPUKERN_UNROLL for (int q = 0; q < RP; ++q) {
    int32_t* r0 = acc + 2 * q * ldacc;
    CPUKERN_UNROLL for (int j = 0; j < NJ; j += 2) {
      const int64x2_t x = vreinterpretq_s64_s32(c[q][j]), y = vreinterpretq_s64_s32(c[q][j + 1]);
      vst1q_s32(r0 + 2 * j, vreinterpretq_s32_s64(vzip1q_s64(x, y)));
      vst1q_s32(r0 + ldacc + 2 * j, vreinterpretq_s32_s64(vzip2q_s64(x, y)));
    }
  }
}

struct Tile : Int8TileDefaults {
  static constexpr int kMR = 8, kNR = 8, kKR = 8, kNP = 4, kARows = 2, kActW = 4;
  using A = int8_t;
  static int64_t a_stride(int64_t k) { return round_up(k, kKR); }
  static int64_t rows(int64_t rem) { return rem < kMR ? rem : kMR; }  // blocks start even
  static int w_at(int col, int kk) { return (col / 2) * 16 + (col % 2) * 8 + kk; }
  // Row r into its pair's interleaved order; the pair's second row of an odd m is zeros
  // (int8_pack_a passes it as a zero row).
  static void put_a(const int8_t* q, int64_t k, int64_t r, int8_t* rows, int64_t lda) {
    int8_t* d = rows + (r & ~int64_t(1)) * lda + (r & 1) * 8;
    for (int64_t s = 0; s < lda / 8; ++s)
      for (int kk = 0; kk < 8; ++kk) d[16 * s + kk] = s * 8 + kk < k ? q[s * 8 + kk] : int8_t(0);
  }
  template <int M>
  static void tile(const int8_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                   int np, int32_t* acc, int64_t ldacc) {
    constexpr int RP = (M + 1) / 2;                   // only the pairs packed A holds
    constexpr int G = RP == 1 ? 4 : RP == 2 ? 2 : 1;  // panels per register tile
    panel_groups<G, 1>(np, [&](auto g, int j) {
      smmla_tile<RP, g>(a, lda, ks, w + j * panel, panel, acc + j * 8, ldacc);
    });
  }
};

}  // namespace

const Ukernel moe_gemm_f32_qd8_qc8wp8x8_8x8__neon_i8mm =
    make_ukernel<Tile>("moe_gemm_f32_qd8_qc8wp8x8_8x8__neon_i8mm", "qc8wp8x8");

}  // namespace cpukern::moe
