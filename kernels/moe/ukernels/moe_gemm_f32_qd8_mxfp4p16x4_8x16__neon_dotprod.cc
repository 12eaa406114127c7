// The AArch64 SDOT (FEAT_DotProd) W4A8 micro-kernel (MXFP4 weights, int8 activations;
// w4a8_loop.h): the W4A8 column of the neon_dotprod row (Neoverse N1 / Graviton2 class).
//
// Layout "mxfp4p16x4": per panel of 16 columns and block of 32 k, 16 vectors of 16 code
// bytes, vector (quad q, group g) = columns 4q..4q+3 x 4 bytes; byte i of column c holds
// k = 8g + i in its low nibble and k = 8g + 4 + i in its high one. So one and + tbl gives
// an SDOT operand (4 columns x 4 consecutive k, column c in lane c) and ushr + tbl the next,
// against lanes 2g % 4 and 2g % 4 + 1 of the row's 16 A bytes of that half block
// (vdotq_laneq_s32; A stays row-major int8, the W8A8 bytes).
// Per block and quad: 8 sdot per row into an int32 sum that starts at kMagicBits, then one
// fsub and one fmla per row (neon_w4a8.h): the fp32 chain over blocks is one per element.
// Tile: 8 rows x 16 columns. A pass over the blocks keeps NQ quads of every row in registers
// (fp32 accumulators M x NQ, int32 sums M): rows 1-2 the whole panel, 3-4 two quads, 5-8 one.
// The decode is per weight and shared by the M rows, so the passes cost only A and rel
// re-reads from L1; 8 rows amortise it (and + ushr + 2 tbl per 32 weights) over 16 sdot.
#include <arm_neon.h>

#include <cstdint>

#include "kernels/common/unroll.h"
#include "kernels/moe/ukernels/neon_w4a8.h"
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/w4a8_loop.h"

namespace cpukern::moe {
namespace {

using namespace neonw4a8;

// The 4 groups of one quad of one block: 8 sdot per row (lanes of A as template constants).
struct SdotSums {
  template <int M>
  static void run(const Consts& k, const int8_t* a, int64_t lda, const uint8_t* codes,
                  int32x4_t (&s)[M]) {
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) s[r] = k.start();
    CPUKERN_UNROLL for (int h = 0; h < 2; ++h) {  // 16 k: groups 2h, 2h + 1
      int8x16_t av[M];
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) av[r] = vld1q_s8(a + r * lda + 16 * h);
      int8x16_t lo, hi;
      decode(k, codes + 32 * h, lo, hi);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        s[r] = vdotq_laneq_s32(s[r], lo, av[r], 0);
        s[r] = vdotq_laneq_s32(s[r], hi, av[r], 1);
      }
      decode(k, codes + 32 * h + 16, lo, hi);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        s[r] = vdotq_laneq_s32(s[r], lo, av[r], 2);
        s[r] = vdotq_laneq_s32(s[r], hi, av[r], 3);
      }
    }
  }
};

struct Tile : W4a8TileDefaults {
  static constexpr int kMR = 8, kNR = 16, kNP = 1, kActW = 4;
  static_assert(kWOffset == 0, "SDOT is signed x signed: no weight offset");
  static int64_t rows(int64_t rem) { return rem < kMR ? rem : kMR; }
  static int nibble(int col, int kk) {
    const int q = col / 4, g = kk / 8, i = kk % 4, high = (kk / 4) % 2;
    return (((q * 4 + g) * 16) + (col % 4) * 4 + i) * 2 + high;
  }
  template <int M>
  static void tile(const int8_t* a, int64_t lda, const int32_t*, int64_t, int64_t nb,
                   const uint8_t* rel, const uint8_t* codes, int64_t panel, int np, float* acc,
                   int64_t ldacc) {
    constexpr int NQ = M <= 2 ? 4 : M <= 4 ? 2 : 1;  // quads per pass
    quad_tile<SdotSums, M, NQ>(a, lda, nb, rel, codes, panel, np, acc, ldacc);
  }
};

}  // namespace

const Ukernel moe_gemm_f32_qd8_mxfp4p16x4_8x16__neon_dotprod =
    make_w4a8_ukernel<Tile>("moe_gemm_f32_qd8_mxfp4p16x4_8x16__neon_dotprod", "mxfp4p16x4a8");

}  // namespace cpukern::moe
