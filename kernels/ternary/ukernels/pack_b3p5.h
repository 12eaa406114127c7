// The b3p5c<C> packer body (layouts.h), shared by the b3p5c160 and b3p5c320 packer files:
// a row's public codes are expanded to one t = w + 1 per column (1 past k), then each
// layout byte is the biased base-3 code of its 5 columns.
#pragma once
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/pack_rows.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary::b3p5 {

// Public byte (codes of 4 columns) -> their t = w + 1, one per byte of a uint32.
struct TritTable {
  uint32_t v[256] = {};
  constexpr TritTable() {
    for (int b = 0; b < 256; ++b)
      for (int c = 0; c < 4; ++c)
        v[b] |= uint32_t(ternary_codes::decode(uint32_t(b), c) + 1) << (8 * c);
  }
};
inline constexpr TritTable kTrits{};

// v = sum_d t_d 3^(4-d) (0..242) -> the stored byte ceil(v 256 / 243) ^ 0x80.
struct CodeTable {
  uint8_t v[243] = {};
  constexpr CodeTable() {
    for (int i = 0; i < 243; ++i) v[i] = uint8_t(((i * 256 + 242) / 243) ^ 0x80);
  }
};
inline constexpr CodeTable kCode{};

// Writes every byte of the layout for rows [0, m); columns past k get w = 0 (t = 1).
template <int64_t kCols>
CPUKERN_SCALAR_LOOKUPS void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  constexpr int64_t kVB = kCols / 5;  // layout bytes per block
  const int64_t words = words_for(k), rb = layouts::b3p5_row_bytes(k, kCols);
  const int64_t cols = rb / kVB * kCols;  // the row's columns, padding included
  uint8_t* out = static_cast<uint8_t*>(dst);
  pack_rows::RowBuffer row(words * 4);
  std::vector<uint8_t> t(size_t(std::max<int64_t>(cols, words * 16)) + 4);
  for (int64_t r = 0; r < m; ++r) {
    const uint8_t* s = row.load(packed + r * words);
    for (int64_t b = 0; b < words * 4; ++b) std::memcpy(&t[size_t(4 * b)], &kTrits.v[s[b]], 4);
    std::memset(&t[size_t(k)], 1, t.size() - size_t(k));  // past k: w = 0 (codes there are 0)
    uint8_t* o = out + r * rb;
    for (int64_t blk = 0; blk < rb; blk += kVB) {
      const uint8_t* tb = &t[size_t(blk / kVB * kCols)];
      for (int64_t i = 0; i < kVB; ++i) {
        const int v = (((tb[i] * 3 + tb[i + kVB]) * 3 + tb[i + 2 * kVB]) * 3 + tb[i + 3 * kVB]) * 3 +
                      tb[i + 4 * kVB];
        o[blk + i] = kCode.v[v];
      }
    }
  }
}

}  // namespace cpukern::ternary::b3p5
