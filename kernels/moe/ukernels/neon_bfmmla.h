// Shared by the BFMMLA micro-kernels (compiled with -march=armv8.2-a+bf16 only).
//
// vbfmmlaq_f32(acc, a, b): acc (2x2 fp32) += A (2x4 bf16) * B (4x2 bf16), where a holds 4 k of
// row 0 then 4 k of row 1, and b 4 k of column 0 then 4 k of column 1. An accumulator therefore
// holds a 2x2 block of C as [r0c0 r0c1 r1c0 r1c1].
//
// Packings ("bf16p8x4"): weights [ceil(o/8)][Kp/4][4 column pairs][2][4] bf16; A per block of 8
// rows [Kp/4][4 row pairs][2][4] bf16, rows past m and k past K zero.
#pragma once
#include <arm_neon.h>

#include <cstdint>

namespace cpukern::moe::bfmmla {

constexpr int kKR = 4;

// Loads 8 columns of rows r0 and r1 of C (zeros when !load or a row is missing: nullptr) and
// interleaves them into the accumulators of column pairs (0,1), (2,3), (4,5), (6,7).
inline void init_acc_rowpair(const float* r0, const float* r1, bool load, float32x4_t& a01,
                             float32x4_t& a23, float32x4_t& a45, float32x4_t& a67) {
  float32x4_t x0 = vdupq_n_f32(0.0f), x1 = x0, y0 = x0, y1 = x0;
  if (load && r0) x0 = vld1q_f32(r0), x1 = vld1q_f32(r0 + 4);
  if (load && r1) y0 = vld1q_f32(r1), y1 = vld1q_f32(r1 + 4);
  const float64x2_t dx0 = vreinterpretq_f64_f32(x0), dx1 = vreinterpretq_f64_f32(x1);
  const float64x2_t dy0 = vreinterpretq_f64_f32(y0), dy1 = vreinterpretq_f64_f32(y1);
  a01 = vreinterpretq_f32_f64(vzip1q_f64(dx0, dy0));
  a23 = vreinterpretq_f32_f64(vzip2q_f64(dx0, dy0));
  a45 = vreinterpretq_f32_f64(vzip1q_f64(dx1, dy1));
  a67 = vreinterpretq_f32_f64(vzip2q_f64(dx1, dy1));
}

// The inverse: writes 8 columns of the rows that exist (r0 / r1 nullptr: skipped).
inline void store_acc_rowpair(float* r0, float* r1, float32x4_t a01, float32x4_t a23,
                              float32x4_t a45, float32x4_t a67) {
  const float64x2_t d01 = vreinterpretq_f64_f32(a01), d23 = vreinterpretq_f64_f32(a23);
  const float64x2_t d45 = vreinterpretq_f64_f32(a45), d67 = vreinterpretq_f64_f32(a67);
  if (r0) {
    vst1q_f32(r0, vreinterpretq_f32_f64(vzip1q_f64(d01, d23)));
    vst1q_f32(r0 + 4, vreinterpretq_f32_f64(vzip1q_f64(d45, d67)));
  }
  if (r1) {
    vst1q_f32(r1, vreinterpretq_f32_f64(vzip2q_f64(d01, d23)));
    vst1q_f32(r1 + 4, vreinterpretq_f32_f64(vzip2q_f64(d45, d67)));
  }
}

// Row pointer of row `row` of a C tile with `mrows` valid rows, or nullptr.
inline float* row_or_null(float* c, int64_t ldc, int row, int mrows) {
  return row < mrows ? c + row * ldc : nullptr;
}

// 4 x (8 * NP) tile over NP consecutive weight panels; rows >= mrows (<= 4) are neither
// loaded nor stored. a: one packed A block; w: the first panel; kb: Kp / 4.
template <int NP>
void kernel_4x16(const bfloat16_t* a, const bfloat16_t* w, int64_t kb, float* c, int64_t ldc,
                 int mrows, bool accumulate);
extern template void kernel_4x16<1>(const bfloat16_t*, const bfloat16_t*, int64_t, float*, int64_t,
                                    int, bool);
extern template void kernel_4x16<2>(const bfloat16_t*, const bfloat16_t*, int64_t, float*, int64_t,
                                    int, bool);

}  // namespace cpukern::moe::bfmmla
