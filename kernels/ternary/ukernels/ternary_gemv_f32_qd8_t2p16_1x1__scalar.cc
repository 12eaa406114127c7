// Reference int8 micro-kernel: public t2p16 layout, exact int32 sums of +-q.
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

int64_t row_bytes(int64_t k) { return words_for(k) * 4; }
int64_t packed_size(int64_t m, int64_t k) { return m * row_bytes(k); }

void run(const I8Args* a) {
  const int64_t words = words_for(a->k);
  for (int64_t r = 0; r < a->rows; ++r) {
    const uint32_t* w = static_cast<const uint32_t*>(a->w) + r * words;
    for (int64_t b = 0; b < a->batch; ++b) {
      const int8_t* x = a->xq + b * a->xq_stride;
      int32_t acc = 0;
      for (int64_t i = 0; i < words; ++i) {
        const int8_t* xw = x + 16 * i;  // xq is zero-padded to a multiple of 256
        for (uint32_t m = ternary_codes::add_mask(w[i]); m; m &= m - 1) acc += xw[__builtin_ctz(m)];
        for (uint32_t m = ternary_codes::sub_mask(w[i]); m; m &= m - 1) acc -= xw[__builtin_ctz(m)];
      }
      a->y[b * a->ldy + r] = acc;
    }
  }
}

}  // namespace

const I8Ukernel ternary_gemv_f32_qd8_t2p16_1x1__scalar = {
    "ternary_gemv_f32_qd8_t2p16_1x1__scalar", "t2p16", 1, packed_size, row_bytes, run};

}  // namespace cpukern::ternary
