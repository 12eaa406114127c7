// The q2b<C> packer body (layouts.h), shared by the q2b128 and q2b256 packer files.
#pragma once
#include <cstring>

#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary::q2b {

template <int64_t kCols>
void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  constexpr int64_t kVB = kCols / 4;  // bytes per block
  const int64_t words = words_for(k), rb = layouts::q2b_row_bytes(k, kCols);
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* row = out + r * rb;
    // Columns past k get code 1 (w = 0); x is zero there anyway.
    std::memset(row, 0x55, size_t(rb));
    for (int64_t j = 0; j < k; ++j) {
      const int w = ternary_codes::decode(packed[r * words + j / 16], int(j % 16));
      const uint32_t v = uint32_t(w + 1);
      const int64_t c = j % kCols, quarter = c / kVB;
      uint8_t& byte = row[(j / kCols) * kVB + c % kVB];
      byte = uint8_t((byte & ~(3u << (2 * quarter))) | (v << (2 * quarter)));
    }
  }
}

}  // namespace cpukern::ternary::q2b
