// Reference int8 micro-kernel: public t2p16 layout, exact int32 sums of +-q.
#include <cstring>

#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

int64_t row_bytes(int64_t k) { return words_for(k) * 4; }
int64_t packed_size(int64_t m, int64_t k) { return m * row_bytes(k); }

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  std::memcpy(dst, packed, size_t(packed_size(m, k)));
}

void run(const I8Args* a) {
  const int64_t words = words_for(a->k);
  for (int64_t r = 0; r < a->rows; ++r) {
    const uint32_t* w = static_cast<const uint32_t*>(a->w) + r * words;
    for (int64_t b = 0; b < a->batch; ++b) {
      const int8_t* x = a->xq + b * a->xq_stride;
      int32_t acc = 0;
      for (int64_t j = 0; j < a->k; ++j) {
        const uint32_t code = (w[j >> 4] >> ((j & 15) << 1)) & 3u;
        if (code == 2u) acc += x[j];
        if (code == 1u) acc -= x[j];
      }
      a->y[b * a->ldy + r] = acc;
    }
  }
}

}  // namespace

const I8Ukernel ternary_gemv_i8_t2p16_1x1__scalar = {
    "ternary_gemv_i8_t2p16_1x1__scalar", 1, packed_size, row_bytes, pack, run};

}  // namespace cpukern::ternary
