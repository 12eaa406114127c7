// Reference int8 micro-kernel of the b3p5c160 layout (layouts.h), the readable spec of its
// decode: digit d of a byte is the integer part of 3 b_d / 256, b_{d+1} = 3 b_d mod 256.
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

constexpr int64_t kCols = 160, kVB = kCols / 5;

int64_t row_bytes(int64_t k) { return layouts::b3p5_row_bytes(k, kCols); }
int64_t packed_size(int64_t m, int64_t k) { return m * row_bytes(k); }

void run(const I8Args* a) {
  const int64_t rb = row_bytes(a->k);
  for (int64_t r = 0; r < a->rows; ++r) {
    const uint8_t* w = static_cast<const uint8_t*>(a->w) + r * rb;
    for (int64_t b = 0; b < a->batch; ++b) {
      const int8_t* x = a->xq + b * a->xq_stride;
      int32_t acc = 0;
      for (int64_t i = 0; i < rb; ++i) {
        const int64_t col0 = i / kVB * kCols + i % kVB;
        uint32_t v = w[i] ^ 0x80u;
        for (int64_t d = 0; d < 5; ++d, v = (3 * v) & 255u) {
          const int64_t j = col0 + d * kVB;
          const int t = int((3 * v) >> 8);  // w + 1; padding columns (j >= k) hold w = 0
          if (j < a->k) acc += (t - 1) * x[j];
        }
      }
      a->y[b * a->ldy + r] = acc;
    }
  }
}

}  // namespace

const I8Ukernel ternary_gemv_f32_qd8_b3p5c160_1x1__scalar = {
    "ternary_gemv_f32_qd8_b3p5c160_1x1__scalar", "b3p5c160", 1, packed_size, row_bytes, run};

}  // namespace cpukern::ternary
