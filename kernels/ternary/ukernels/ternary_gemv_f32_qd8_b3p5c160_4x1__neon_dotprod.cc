// int8 ternary GEMV, b3p5c160 layout (layouts.h: 5 trits per byte), 4-row tiles, NEON SDOT.
// A 16-byte half of a block's 32 bytes holds, in digit d, the columns d * 32 + (0..15 or
// 16..31). Decode per digit: s = 3 s (two adds, from the second digit on), then the weight
// itself, w = [s < -42] - [s > 42] (two compares and a subtract of the masks: signed SDOT
// needs no w + 1 and no xsum). 6 ops + 1 sdot per 16 weights and batch row.
#include <arm_neon.h>

#include <algorithm>
#include <cstring>

#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

constexpr int64_t kCols = 160, kVB = 32;

int64_t row_bytes(int64_t k) { return layouts::b3p5_row_bytes(k, kCols); }
int64_t packed_size(int64_t m, int64_t k) { return m * row_bytes(k); }

// Activations of block blk, batch row b: the shared buffer, or (the last block, when it runs
// past the zero-padded k) a zero-padded copy.
struct XBlocks {
  const int8_t* x;
  int64_t xs, nfull;
  const int8_t* tail;
  const int8_t* at(int64_t blk, int b) const {
    return blk < nfull ? x + b * xs + blk * kCols : tail + b * kCols;
  }
};

template <int R, int NB>
void rows_kernel(const uint8_t* w, int64_t rb, const XBlocks& xb, int32_t* y, int64_t ldy) {
  const int64_t nblk = rb / kVB;
  const int8x16_t lo = vdupq_n_s8(-42), hi = vdupq_n_s8(42);
  int32x4_t acc[R][NB];  // |sum| <= 127 k fits int32 (the driver caps k)
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b] = vdupq_n_s32(0);
  for (int64_t blk = 0; blk < nblk; ++blk) {
    const int8_t* x[NB];
    for (int b = 0; b < NB; ++b) x[b] = xb.at(blk, b);
    for (int h = 0; h < 2; ++h) {
      int8x16_t s[R];
      for (int r = 0; r < R; ++r) s[r] = vld1q_s8(reinterpret_cast<const int8_t*>(w + r * rb + blk * kVB + 16 * h));
      for (int d = 0; d < 5; ++d) {
        int8x16_t xv[NB];
        for (int b = 0; b < NB; ++b) xv[b] = vld1q_s8(x[b] + d * kVB + 16 * h);
        for (int r = 0; r < R; ++r) {
          if (d) s[r] = vaddq_s8(vaddq_s8(s[r], s[r]), s[r]);
          const int8x16_t wv = vsubq_s8(vreinterpretq_s8_u8(vcltq_s8(s[r], lo)),
                                        vreinterpretq_s8_u8(vcgtq_s8(s[r], hi)));
          for (int b = 0; b < NB; ++b) acc[r][b] = vdotq_s32(acc[r][b], wv, xv[b]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) y[b * ldy + r] = vaddvq_s32(acc[r][b]);
}

template <int NB>
void rows_loop(const I8Args* a, int64_t b0) {
  constexpr int R = NB == 1 ? 4 : 2;
  const int64_t rb = row_bytes(a->k), nblk = rb / kVB, kpad = i8_kpad(a->k);
  XBlocks xb{a->xq + b0 * a->xq_stride, a->xq_stride, std::min(nblk, kpad / kCols), nullptr};
  alignas(16) int8_t tail[NB][kCols];
  if (xb.nfull < nblk) {
    const int64_t have = kpad - xb.nfull * kCols;
    for (int b = 0; b < NB; ++b) {
      std::memcpy(tail[b], xb.x + b * xb.xs + xb.nfull * kCols, size_t(have));
      std::memset(tail[b] + have, 0, size_t(kCols - have));
    }
    xb.tail = &tail[0][0];
  }
  const uint8_t* w = static_cast<const uint8_t*>(a->w);
  int32_t* y = a->y + b0 * a->ldy;
  int64_t r = 0;
  for (; r + R <= a->rows; r += R) rows_kernel<R, NB>(w + r * rb, rb, xb, y + r, a->ldy);
  for (; r < a->rows; ++r) rows_kernel<1, NB>(w + r * rb, rb, xb, y + r, a->ldy);
}

void run(const I8Args* a) {
  int64_t b = 0;
  for (; b + 2 <= a->batch; b += 2) rows_loop<2>(a, b);
  if (b < a->batch) rows_loop<1>(a, b);
}

}  // namespace

const I8Ukernel ternary_gemv_f32_qd8_b3p5c160_4x1__neon_dotprod = {
    "ternary_gemv_f32_qd8_b3p5c160_4x1__neon_dotprod", "b3p5c160", 4, packed_size, row_bytes, run};

}  // namespace cpukern::ternary
