// int8 ternary GEMV, q2b128 layout, 4-row tiles, NEON I8MM (SMMLA; q2b_neon.h).
//
// Batch >= 2: SMMLA (vmmlaq_s32) multiplies a 2x8 int8 matrix by the transpose of another
// into a 2x2 int32 tile: A = 2 batch rows x 8 columns of activations, B = 2 weight rows x the
// same 8 columns of (w + 1), so one instruction does 32 multiply-adds where SDOT does 16.
// Two rows' packed bytes are interleaved by 64-bit halves (zip1/zip2) before decoding (the
// decode is bytewise, so it commutes with the zip), the activations of the batch pair
// likewise. Quarters keep their scale (q2b_neon.h): three accumulators per 2x2 tile.
// Batch 1, the last odd batch row and rows past the last group of 4 use the SDOT loop.
#include "kernels/ternary/ukernels/q2b_neon.h"

namespace cpukern::ternary {
namespace {

using q2b_neon::Acc3;
using q2b_neon::kCols;
using q2b_neon::kVB;

inline int64x2_t s64(int8x16_t v) { return vreinterpretq_s64_s8(v); }
inline int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip1q_s64(s64(a), s64(b)));
}
inline int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip2q_s64(s64(a), s64(b)));
}

// P row pairs (2P rows) x batch rows b, b + 1.
template <int P>
void pairs_kernel(const uint8_t* w, int64_t rb, const int8_t* x, int64_t xs,
                  const int32_t* xsum, int32_t* y, int64_t ldy) {
  const int64_t nblk = rb / kVB;
  int32x4_t tot[P];
  for (int p = 0; p < P; ++p) tot[p] = vdupq_n_s32(0);
  for (int64_t b0 = 0; b0 < nblk; b0 += q2b_neon::kFlushBlocks) {
    const int64_t b1 = nblk - b0 < q2b_neon::kFlushBlocks ? nblk : b0 + q2b_neon::kFlushBlocks;
    Acc3 acc[P];
    for (int p = 0; p < P; ++p) acc[p] = q2b_neon::acc3_zero();
    const uint8_t* wb = w + b0 * kVB;
    const int8_t* xb = x + b0 * kCols;
    for (int64_t blk = b0; blk < b1; ++blk, wb += kVB, xb += kCols) {
      for (int h = 0; h < 2; ++h) {
        // Activations of quarter i, columns 16h + (0..7) and (8..15), batch rows b, b + 1.
        int8x16_t xl[4], xh[4];
        for (int i = 0; i < 4; ++i) {
          const int8x16_t u = vld1q_s8(xb + 32 * i + 16 * h);
          const int8x16_t v = vld1q_s8(xb + xs + 32 * i + 16 * h);
          xl[i] = zip_lo(u, v);
          xh[i] = zip_hi(u, v);
        }
        for (int p = 0; p < P; ++p) {
          const uint8_t* wr = wb + 2 * p * rb + 16 * h;
          const int8x16_t u = vreinterpretq_s8_u8(vld1q_u8(wr));
          const int8x16_t v = vreinterpretq_s8_u8(vld1q_u8(wr + rb));
          const q2b_neon::Quarters lo =
              q2b_neon::decode_scaled(vreinterpretq_u8_s8(zip_lo(u, v)));
          const q2b_neon::Quarters hi =
              q2b_neon::decode_scaled(vreinterpretq_u8_s8(zip_hi(u, v)));
          acc[p].s1 = vmmlaq_s32(acc[p].s1, xl[0], lo.q0);
          acc[p].s1 = vmmlaq_s32(acc[p].s1, xh[0], hi.q0);
          acc[p].s4 = vmmlaq_s32(acc[p].s4, xl[1], lo.q1x4);
          acc[p].s4 = vmmlaq_s32(acc[p].s4, xh[1], hi.q1x4);
          acc[p].s16 = vmmlaq_s32(acc[p].s16, xl[2], lo.q2x16);
          acc[p].s16 = vmmlaq_s32(acc[p].s16, xh[2], hi.q2x16);
          acc[p].s1 = vmmlaq_s32(acc[p].s1, xl[3], lo.q3);
          acc[p].s1 = vmmlaq_s32(acc[p].s1, xh[3], hi.q3);
        }
      }
    }
    for (int p = 0; p < P; ++p) tot[p] = vaddq_s32(tot[p], q2b_neon::acc3_total(acc[p]));
  }
  // Lane 2i + j: batch row b + i, weight row 2p + j.
  for (int p = 0; p < P; ++p) {
    int32_t t[4];
    vst1q_s32(t, tot[p]);
    y[2 * p] = t[0] - xsum[0];
    y[2 * p + 1] = t[1] - xsum[0];
    y[ldy + 2 * p] = t[2] - xsum[1];
    y[ldy + 2 * p + 1] = t[3] - xsum[1];
  }
}

void run(const I8Args* a) {
  const int64_t rb = q2b_neon::row_bytes(a->k);
  const int64_t rows4 = a->rows & ~int64_t(3);
  int64_t b = 0;
  for (; b + 2 <= a->batch; b += 2) {
    const uint8_t* w = static_cast<const uint8_t*>(a->w);
    const int8_t* x = a->xq + b * a->xq_stride;
    int32_t* y = a->y + b * a->ldy;
    for (int64_t r = 0; r < rows4; r += 4, w += 4 * rb, y += 4)
      pairs_kernel<2>(w, rb, x, a->xq_stride, a->xsum + b, y, a->ldy);
  }
  // Rows past the last group of 4 (all batch rows of the pairs), then the odd batch row.
  if (rows4 < a->rows && b > 0) {
    I8Args t = *a;
    t.batch = b;
    q2b_neon::sdot_batches(&t, rows4, 0);
  }
  if (b < a->batch) q2b_neon::sdot_range<1>(a, 0, b);
}

}  // namespace

const I8Ukernel ternary_gemv_f32_qd8_q2b128_4x1__neon_i8mm = {
    "ternary_gemv_f32_qd8_q2b128_4x1__neon_i8mm", "q2b128", 4, q2b_neon::packed_size,
    q2b_neon::row_bytes, run};

}  // namespace cpukern::ternary
