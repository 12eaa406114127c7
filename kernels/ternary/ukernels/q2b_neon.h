// Shared by the NEON int8 micro-kernels of the q2b128 layout (layouts.h: per row, per block of
// 128 columns 32 bytes; byte i holds (w + 1) of columns i, i + 32, i + 64, i + 96 in bits
// 0-1, 2-3, 4-5, 6-7). A 16-byte vector v of a block (bytes 0-15 or 16-31) holds, in
// quarter q, the columns q * 32 + (0..15 or 16..31). sum_j w_j q_j = sum_j (w_j + 1) q_j -
// sum_j q_j (the driver's xsum).
#pragma once
#include <arm_neon.h>

#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary::q2b_neon {

constexpr int64_t kCols = 128;  // columns per block
constexpr int64_t kVB = 32;     // bytes per block

inline int64_t row_bytes(int64_t k) { return layouts::q2b_row_bytes(k, kCols); }
inline int64_t packed_size(int64_t m, int64_t k) { return m * row_bytes(k); }

// Decoding without the shift back: quarters 0 and 3 as (w + 1) (v & 3, v >> 6), quarters 1
// and 2 as 4 (w + 1) and 16 (w + 1) (v & 0x0C, v & 0x30; <= 32, still a positive int8). The
// dot products of each scale go to their own int32 accumulator, whose lanes are then exact
// multiples of 4 or 16: shifting them back right is exact. 4 ops per 16 bytes instead of 6.
struct Quarters {
  int8x16_t q0, q1x4, q2x16, q3;
};
inline Quarters decode_scaled(uint8x16_t v) {
  return {vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x03))),
          vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0C))),
          vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x30))),
          vreinterpretq_s8_u8(vshrq_n_u8(v, 6))};
}

// The three accumulators of one (row, batch row) pair: scale 1, 4 and 16.
struct Acc3 {
  int32x4_t s1, s4, s16;
};
inline Acc3 acc3_zero() { return {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)}; }
// Lane-wise exact total (the lanes of s4 / s16 are multiples of 4 / 16).
inline int32x4_t acc3_total(const Acc3& a) {
  return vaddq_s32(vaddq_s32(a.s1, vshrq_n_s32(a.s4, 2)), vshrq_n_s32(a.s16, 4));
}
// Blocks accumulated before acc3_total (no int32 lane overflows: per block a lane of s16 gains
// at most 8 products of 32 * 127).
constexpr int64_t kFlushBlocks = 2048;

#if defined(__ARM_FEATURE_DOTPROD)
// R rows x NB batch rows with SDOT; y[b * ldy + r] = sum (w + 1) q - xsum[b].
template <int R, int NB>
inline void sdot_rows(const uint8_t* w, int64_t rb, const int8_t* x, int64_t xs,
                      const int32_t* xsum, int32_t* y, int64_t ldy) {
  const int64_t nblk = rb / kVB;
  int32x4_t tot[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) tot[r][b] = vdupq_n_s32(0);
  for (int64_t b0 = 0; b0 < nblk; b0 += kFlushBlocks) {
    const int64_t b1 = nblk - b0 < kFlushBlocks ? nblk : b0 + kFlushBlocks;
    Acc3 acc[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) acc[r][b] = acc3_zero();
    const uint8_t* wb = w + b0 * kVB;
    const int8_t* xb = x + b0 * kCols;
    for (int64_t blk = b0; blk < b1; ++blk, wb += kVB, xb += kCols) {
      for (int h = 0; h < 2; ++h) {
        Quarters q[R];
        for (int r = 0; r < R; ++r) q[r] = decode_scaled(vld1q_u8(wb + r * rb + 16 * h));
        for (int b = 0; b < NB; ++b) {
          const int8_t* xh = xb + b * xs + 16 * h;
          const int8x16_t x0 = vld1q_s8(xh), x1 = vld1q_s8(xh + 32);
          const int8x16_t x2 = vld1q_s8(xh + 64), x3 = vld1q_s8(xh + 96);
          for (int r = 0; r < R; ++r) {
            acc[r][b].s1 = vdotq_s32(acc[r][b].s1, q[r].q0, x0);
            acc[r][b].s4 = vdotq_s32(acc[r][b].s4, q[r].q1x4, x1);
            acc[r][b].s16 = vdotq_s32(acc[r][b].s16, q[r].q2x16, x2);
            acc[r][b].s1 = vdotq_s32(acc[r][b].s1, q[r].q3, x3);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) tot[r][b] = vaddq_s32(tot[r][b], acc3_total(acc[r][b]));
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) y[b * ldy + r] = vaddvq_s32(tot[r][b]) - xsum[b];
}

// Rows [r0, rows) for batch rows [b0, b0 + NB) with sdot_rows (groups of 4 rows at NB = 1,
// 2 at NB = 2: 12 accumulators).
template <int NB>
inline void sdot_range(const I8Args* a, int64_t r0, int64_t b0) {
  constexpr int R = NB == 1 ? 4 : 2;
  const int64_t rb = row_bytes(a->k);
  const uint8_t* w = static_cast<const uint8_t*>(a->w) + r0 * rb;
  const int8_t* x = a->xq + b0 * a->xq_stride;
  int32_t* y = a->y + b0 * a->ldy + r0;
  int64_t r = r0;
  for (; r + R <= a->rows; r += R, w += R * rb, y += R)
    sdot_rows<R, NB>(w, rb, x, a->xq_stride, a->xsum + b0, y, a->ldy);
  for (; r < a->rows; ++r, w += rb, ++y)
    sdot_rows<1, NB>(w, rb, x, a->xq_stride, a->xsum + b0, y, a->ldy);
}

// Batch rows [b0, batch) in groups of up to 2.
inline void sdot_batches(const I8Args* a, int64_t r0, int64_t b0) {
  for (; b0 + 2 <= a->batch; b0 += 2) sdot_range<2>(a, r0, b0);
  if (b0 < a->batch) sdot_range<1>(a, r0, b0);
}
#endif

}  // namespace cpukern::ternary::q2b_neon
