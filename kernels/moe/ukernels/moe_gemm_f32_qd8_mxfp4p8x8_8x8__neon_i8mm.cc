// The AArch64 SMMLA (FEAT_I8MM) W4A8 micro-kernel (MXFP4 weights, int8 activations;
// w4a8_loop.h): the W4A8 column of the neon_bf16 rows (BF16 + I8MM cores: Neoverse V1/N2/V2).
//
// vmmlaq_s32(acc, a, b): acc (2x2 int32) += A (2 rows x 8 k) * B (2 columns x 8 k)^T,
// acc = [r0c0 r0c1 r1c0 r1c1] (as the W8A8 SMMLA tile).
// Layout "mxfp4p8x8": per panel of 8 columns and block of 32 k, 8 vectors of 16 code bytes,
// vector (column pair j, half h) = 8 bytes of column 2j then 8 of column 2j + 1; byte i holds
// k = 16h + i in its low nibble and k = 16h + 8 + i in its high one. So one and + tbl gives
// an SMMLA B operand (2 columns x 8 consecutive k) and ushr + tbl the next 8 k. A in row
// pairs of 8 k (the W8A8 SMMLA tile's order, put_a below).
// Per block and column pair: 4 smmla per row pair into an int32 2x2 that starts at
// kMagicBits, then one fsub and one fmla with [m(2j) m(2j+1) m(2j) m(2j+1)] (neon_w4a8.h).
// Tile: 8 rows x 8 columns, 16 fp32 accumulators; the block's column pairs one after the other
// (4 int32 sums live, A re-read from L1 per pair: 16 fp32 + 16 int32 sums would not fit).
#include <arm_neon.h>

#include <cstdint>

#include "kernels/common/unroll.h"
#include "kernels/moe/ukernels/neon_w4a8.h"
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/w4a8_loop.h"

namespace cpukern::moe {
namespace {

using namespace neonw4a8;

// acc rows 0 .. M-1 x columns 2 j0 .. 2 (j0 + NJ) - 1 = step 5 over nb blocks of one panel,
// RP = (M + 1) / 2 row pairs (a: the first pair's packed rows; a pair's 8 k steps are 16
// bytes apart), column pairs j0 .. j0 + NJ - 1.
template <int M, int NJ>
inline void smmla_pass(const int8_t* a, int64_t lda, int64_t nb, const uint8_t* rel,
                       const uint8_t* codes, int j0, float* acc, int64_t ldacc) {
  constexpr int RP = (M + 1) / 2;
  const Consts k;
  float32x4_t c[RP][NJ];
  CPUKERN_UNROLL for (int q = 0; q < RP; ++q)
    CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) c[q][j] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* ab = a + b * 64;  // 4 steps of 8 k x 2 rows
    const uint8_t* cb = codes + b * 128 + 32 * j0;
    CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) {
      // A is re-read per column pair: an opaque copy of the pointer keeps GCC from holding
      // the block's 4 RP A vectors across the pairs (spills, whose stores take V pipes).
      const int8_t* aj = ab;
      asm("" : "+r"(aj));
      int32x4_t s[RP];
      CPUKERN_UNROLL for (int q = 0; q < RP; ++q) s[q] = k.start();
      CPUKERN_UNROLL for (int h = 0; h < 2; ++h) {
        int8x16_t lo, hi;
        decode(k, cb + (2 * j + h) * 16, lo, hi);
        CPUKERN_UNROLL for (int q = 0; q < RP; ++q) {
          const int8_t* aq = aj + 2 * q * lda + 32 * h;
          s[q] = vmmlaq_s32(s[q], vld1q_s8(aq), lo);
          s[q] = vmmlaq_s32(s[q], vld1q_s8(aq + 16), hi);
        }
      }
      const float32x4_t m = mults_pair(rel + b * 8 + 2 * (j0 + j));
      CPUKERN_UNROLL for (int q = 0; q < RP; ++q) c[q][j] = fma_block(k, s[q], m, c[q][j]);
    }
  }
  // Two column pairs -> 4 columns of each row of the pair (zip of the 64-bit halves).
  CPUKERN_UNROLL for (int q = 0; q < RP; ++q)
    CPUKERN_UNROLL for (int j = 0; j < NJ; j += 2) {
      const float64x2_t x = vreinterpretq_f64_f32(c[q][j]), y = vreinterpretq_f64_f32(c[q][j + 1]);
      float* r0 = acc + 2 * q * ldacc + 2 * (j0 + j);
      vst1q_f32(r0, vreinterpretq_f32_f64(vzip1q_f64(x, y)));
      if (2 * q + 1 < M) vst1q_f32(r0 + ldacc, vreinterpretq_f32_f64(vzip2q_f64(x, y)));
    }
}

struct Tile : W4a8TileDefaults {
  static constexpr int kMR = 8, kNR = 8, kNP = 1, kARows = 2, kActW = 4;
  static_assert(kWOffset == 0, "SMMLA is signed x signed: no weight offset");
  static int64_t rows(int64_t rem) { return rem < kMR ? rem : kMR; }  // blocks start even
  static int nibble(int col, int kk) {
    const int j = col / 2, h = kk / 16, i = kk % 8, high = (kk / 8) % 2;
    return ((j * 2 + h) * 16 + (col % 2) * 8 + i) * 2 + high;
  }
  // Row r into its pair's interleaved order ([k step of 8][2 rows][8 k]); the pair's second
  // row of an odd m is zeros (w4a8_pack_a passes it as a zero row).
  static void put_a(const int8_t* q, int64_t k, int64_t r, int8_t* rows, int64_t lda) {
    int8_t* d = rows + (r & ~int64_t(1)) * lda + (r & 1) * 8;
    for (int64_t s = 0; s < lda / 8; ++s)
      for (int kk = 0; kk < 8; ++kk) d[16 * s + kk] = s * 8 + kk < k ? q[s * 8 + kk] : int8_t(0);
  }
  template <int M>
  static void tile(const int8_t* a, int64_t lda, const int32_t*, int64_t, int64_t nb,
                   const uint8_t* rel, const uint8_t* codes, int64_t panel, int np, float* acc,
                   int64_t ldacc) {
    constexpr int NJ = M <= 4 ? 4 : 2;  // column pairs per pass: 8 rows hold 2 x 4 x 2 sums
    for (int j = 0; j < np; ++j)
      CPUKERN_UNROLL for (int j0 = 0; j0 < 4; j0 += NJ)
        smmla_pass<M, NJ>(a, lda, nb, rel + j * panel, codes + j * panel, j0, acc + j * kNR, ldacc);
  }
};

}  // namespace

const Ukernel moe_gemm_f32_qd8_mxfp4p8x8_8x8__neon_i8mm =
    make_w4a8_ukernel<Tile>("moe_gemm_f32_qd8_mxfp4p8x8_8x8__neon_i8mm", "mxfp4p8x8a8");

}  // namespace cpukern::moe
