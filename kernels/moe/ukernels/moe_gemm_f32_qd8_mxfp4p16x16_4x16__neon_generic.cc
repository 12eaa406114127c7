// The ARMv8.0 NEON W4A8 micro-kernel (MXFP4 weights, int8 activations; w4a8_loop.h): the
// W4A8 column of the plain neon row (no SDOT: Cortex-A72 class). Widening multiplies.
//
// Layout "mxfp4p16x16": per panel of 16 columns and block of 32 k, column c's 16 code bytes
// at 16c; byte i holds k = i in its low nibble and k = 16 + i in its high one. So and + tbl
// gives the column's w2 for k 0..15 and ushr + tbl for k 16..31, lane for lane against the
// row's two 16-byte halves of A (row-major int8, the W8A8 bytes).
// Per column and row: smull + 3 smlal(2) give int16 lanes of 4 products each (|.| <= 4 * 127
// * 12 = 6096); per 4 columns two pairwise adds (addp, <= 24384: still int16) leave 2 lanes per
// column, and sadalp adds them pairwise into int32 sums that start at kMagicBits: the 4
// columns' exact block sums in one vector, then one fsub and one fmla (neon_w4a8.h).
// Tile: 4 rows x 16 columns; rows 1-2 keep the panel's 4 quads in registers, rows 3-4 two
// quads per pass over the blocks (the decoded quad, 8 vectors, stays live across the rows).
#include <arm_neon.h>

#include <cstdint>

#include "kernels/common/unroll.h"
#include "kernels/moe/ukernels/neon_w4a8.h"
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/w4a8_loop.h"

namespace cpukern::moe {
namespace {

using namespace neonw4a8;

// One column's 32 products with one row, 4 per int16 lane.
inline int16x8_t column_products(int8x16_t lo, int8x16_t hi, int8x16_t a0, int8x16_t a1) {
  int16x8_t p = vmull_s8(vget_low_s8(lo), vget_low_s8(a0));
  p = vmlal_high_s8(p, lo, a0);
  p = vmlal_s8(p, vget_low_s8(hi), vget_low_s8(a1));
  return vmlal_high_s8(p, hi, a1);
}

// One quad of one block: the 4 columns decoded once, then per row 16 widening multiplies,
// 3 pairwise adds and a sadalp.
struct SmlalSums {
  template <int M>
  static void run(const Consts& k, const int8_t* a, int64_t lda, const uint8_t* codes,
                  int32x4_t (&s)[M]) {
    int8x16_t lo[4], hi[4];
    CPUKERN_UNROLL for (int i = 0; i < 4; ++i) decode(k, codes + 16 * i, lo[i], hi[i]);
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      const int8x16_t a0 = vld1q_s8(a + r * lda), a1 = vld1q_s8(a + r * lda + 16);
      const int16x8_t p01 = vpaddq_s16(column_products(lo[0], hi[0], a0, a1),
                                       column_products(lo[1], hi[1], a0, a1));
      const int16x8_t p23 = vpaddq_s16(column_products(lo[2], hi[2], a0, a1),
                                       column_products(lo[3], hi[3], a0, a1));
      s[r] = vpadalq_s16(k.start(), vpaddq_s16(p01, p23));
    }
  }
};

struct Tile : W4a8TileDefaults {
  static constexpr int kMR = 4, kNR = 16, kNP = 1, kActW = 4;
  static_assert(kWOffset == 0, "smull is signed x signed: no weight offset");
  static int64_t rows(int64_t rem) { return rem < kMR ? rem : kMR; }
  static int nibble(int col, int kk) { return (col * 16 + kk % 16) * 2 + kk / 16; }
  template <int M>
  static void tile(const int8_t* a, int64_t lda, const int32_t*, int64_t, int64_t nb,
                   const uint8_t* rel, const uint8_t* codes, int64_t panel, int np, float* acc,
                   int64_t ldacc) {
    constexpr int NQ = M <= 2 ? 4 : 2;  // quads per pass (the decoded quad: 8 registers)
    quad_tile<SmlalSums, M, NQ>(a, lda, nb, rel, codes, panel, np, acc, ldacc);
  }
};

}  // namespace

const Ukernel moe_gemm_f32_qd8_mxfp4p16x16_4x16__neon_generic =
    make_w4a8_ukernel<Tile>("moe_gemm_f32_qd8_mxfp4p16x16_4x16__neon_generic", "mxfp4p16x16a8");

}  // namespace cpukern::moe
