// Reference int8 micro-kernel: public t2p16 layout, exact int32 sums of +-q.
#include <cstring>

#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

inline uint32_t odd_bits(uint32_t v) {  // portable pext(v, 0xAAAAAAAA)
  v = (v >> 1) & 0x55555555u;
  v = (v | (v >> 1)) & 0x33333333u;
  v = (v | (v >> 2)) & 0x0f0f0f0fu;
  v = (v | (v >> 4)) & 0x00ff00ffu;
  return (v | (v >> 8)) & 0x0000ffffu;
}

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
      for (int64_t i = 0; i < words; ++i) {
        const int8_t* xw = x + 16 * i;  // xq is zero-padded to a multiple of 256
        for (uint32_t m = odd_bits(w[i]); m; m &= m - 1) acc += xw[__builtin_ctz(m)];
        for (uint32_t m = odd_bits(w[i] << 1); m; m &= m - 1) acc -= xw[__builtin_ctz(m)];
      }
      a->y[b * a->ldy + r] = acc;
    }
  }
}

}  // namespace

const I8Ukernel ternary_gemv_i8_t2p16_1x1__scalar = {
    "ternary_gemv_i8_t2p16_1x1__scalar", 1, packed_size, row_bytes, pack, run};

}  // namespace cpukern::ternary
