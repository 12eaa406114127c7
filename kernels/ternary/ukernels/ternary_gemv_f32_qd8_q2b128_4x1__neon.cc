// int8 ternary GEMV, q2b128 layout, 4-row tiles, NEON ARMv8.0 (no SDOT; q2b_neon.h).
// Decoded (w + 1) bytes times int8 activations with widening multiply-accumulate
// (smlal / smlal2) into int16 lanes (each lane gains at most 8 products of 2 * 127 per
// block), widened into int32 with sadalp every kI16Blocks blocks.
#include "kernels/ternary/ukernels/q2b_neon.h"

namespace cpukern::ternary {
namespace {

using q2b_neon::kCols;
using q2b_neon::kVB;
constexpr int64_t kI16Blocks = 16;  // 16 blocks x 8 products x 254 = 32512 <= 32767

inline void mla(int16x8_t& s, int8x16_t q, int8x16_t x) {
  s = vmlal_s8(s, vget_low_s8(q), vget_low_s8(x));
  s = vmlal_high_s8(s, q, x);
}

template <int R, int NB>
void rows_kernel(const uint8_t* w, int64_t rb, const int8_t* x, int64_t xs,
                 const int32_t* xsum, int32_t* y, int64_t ldy) {
  const int64_t nblk = rb / kVB;
  const uint8x16_t three = vdupq_n_u8(3);
  int32x4_t acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b] = vdupq_n_s32(0);
  for (int64_t b0 = 0; b0 < nblk; b0 += kI16Blocks) {
    const int64_t b1 = nblk - b0 < kI16Blocks ? nblk : b0 + kI16Blocks;
    int16x8_t s[R][NB][2];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) s[r][b][0] = s[r][b][1] = vdupq_n_s16(0);
    const uint8_t* wb = w + b0 * kVB;
    const int8_t* xb = x + b0 * kCols;
    for (int64_t blk = b0; blk < b1; ++blk, wb += kVB, xb += kCols) {
      for (int h = 0; h < 2; ++h) {
        int8x16_t q[R][4];
        for (int r = 0; r < R; ++r) {
          const uint8x16_t v = vld1q_u8(wb + r * rb + 16 * h);
          q[r][0] = vreinterpretq_s8_u8(vandq_u8(v, three));
          q[r][1] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(v, 2), three));
          q[r][2] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(v, 4), three));
          q[r][3] = vreinterpretq_s8_u8(vshrq_n_u8(v, 6));
        }
        for (int b = 0; b < NB; ++b) {
          const int8_t* xh = xb + b * xs + 16 * h;
          for (int i = 0; i < 4; ++i) {
            const int8x16_t xv = vld1q_s8(xh + 32 * i);
            for (int r = 0; r < R; ++r) mla(s[r][b][i & 1], q[r][i], xv);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) {
        acc[r][b] = vpadalq_s16(acc[r][b], s[r][b][0]);
        acc[r][b] = vpadalq_s16(acc[r][b], s[r][b][1]);
      }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) y[b * ldy + r] = vaddvq_s32(acc[r][b]) - xsum[b];
}

template <int R, int NB>
void rows_loop(const I8Args* a, int64_t b0) {
  const int64_t rb = q2b_neon::row_bytes(a->k);
  const uint8_t* w = static_cast<const uint8_t*>(a->w);
  const int8_t* x = a->xq + b0 * a->xq_stride;
  int32_t* y = a->y + b0 * a->ldy;
  int64_t r = 0;
  for (; r + R <= a->rows; r += R, w += R * rb, y += R)
    rows_kernel<R, NB>(w, rb, x, a->xq_stride, a->xsum + b0, y, a->ldy);
  for (; r < a->rows; ++r, w += rb, ++y)
    rows_kernel<1, NB>(w, rb, x, a->xq_stride, a->xsum + b0, y, a->ldy);
}

void run(const I8Args* a) {
  int64_t b = 0;
  for (; b + 2 <= a->batch; b += 2) rows_loop<2, 2>(a, b);
  if (b < a->batch) rows_loop<4, 1>(a, b);
}

}  // namespace

const I8Ukernel ternary_gemv_f32_qd8_q2b128_4x1__neon = {
    "ternary_gemv_f32_qd8_q2b128_4x1__neon", "q2b128", 4, q2b_neon::packed_size, q2b_neon::row_bytes,
    run};

}  // namespace cpukern::ternary
