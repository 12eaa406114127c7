// The q2b<C> and q2b<C>r4 packer body (layouts.h), shared by their packer files.
// A block of C columns takes C/4 public bytes and gives C/4 layout bytes: layout bytes
// 4d..4d+3 hold the columns of public bytes d, d + C/16, d + C/8, d + 3C/16 of the block
// (one per quarter), so each public byte is one lookup of its four (w + 1), shifted to its
// quarter's bits.
#pragma once
#include <cstring>

#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/pack_rows.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary::q2b {

// Public byte (codes of 4 columns) -> their (w + 1) in {0, 1, 2}, one per byte of a uint32.
struct PlusOneTable {
  uint32_t v[256] = {};
  constexpr PlusOneTable() {
    for (int b = 0; b < 256; ++b)
      for (int c = 0; c < 4; ++c)
        v[b] |= uint32_t(ternary_codes::decode(uint32_t(b), c) + 1) << (8 * c);
  }
};
inline constexpr PlusOneTable kPlusOne{};

// Writes every byte of the layout for rows [0, m); columns past k get w = 0 (code 1).
// kG: rows interleaved per group (1: q2b<C>, 4: q2b<C>r4; layouts.h).
template <int64_t kCols, int64_t kG = 1>
CPUKERN_SCALAR_LOOKUPS void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  constexpr int64_t kVB = kCols / 4;  // bytes per block, public and packed
  constexpr int64_t kQ = kVB / 4;     // public bytes per quarter
  const int64_t words = words_for(k), rb = layouts::q2b_row_bytes(k, kCols);
  uint8_t* out = static_cast<uint8_t*>(dst);
  pack_rows::RowBuffer row(words * 4, rb);
  for (int64_t r = 0; r < m; ++r) {
    const uint8_t* s = row.load(packed + r * words);
    for (int64_t blk = 0; blk < rb; blk += kVB) {
      uint8_t* o = out + layouts::q2b_block_at(r, m, rb, blk, kVB, kG);
      for (int64_t d = 0; d < kQ; ++d) {
        const uint8_t* p = s + blk + d;
        const uint32_t v = kPlusOne.v[p[0]] | kPlusOne.v[p[kQ]] << 2 |
                           kPlusOne.v[p[2 * kQ]] << 4 | kPlusOne.v[p[3 * kQ]] << 6;
        std::memcpy(o + 4 * d, &v, 4);
      }
    }
  }
}

}  // namespace cpukern::ternary::q2b
