// The lut3r8 packer body, shared by its packer files, which differ only in how they split a
// public word into its 16-bit add / subtract masks (portable shifts, or BMI2 pext).
#pragma once
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary::lut3r8 {

constexpr int64_t kR = layouts::kLut3r8Rows, kCols = layouts::kLut3r8Cols;

// Split(word, &add, &sub).
template <class Split>
void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst, Split split) {
  const int64_t words = words_for(k), nblk = layouts::lut3r8_blocks(k);
  uint32_t* out = static_cast<uint32_t*>(dst);
  for (int64_t r = 0; r < m; ++r) {
    uint32_t* tile = out + (r / kR) * nblk * 2 * kR;
    const int64_t lane = r % kR;
    for (int64_t wi = 0; wi < words; ++wi) {
      uint32_t pos, neg;
      split(packed[r * words + wi], &pos, &neg);
      for (int s = 0; s < 16 && (pos | neg); ++s, pos >>= 1, neg >>= 1) {
        if (!((pos | neg) & 1u)) continue;
        const int64_t j = wi * 16 + s;
        uint32_t* lanes = tile + (j / kCols) * 2 * kR;
        const uint32_t bit = 1u << (j % kCols);  // group c/3, position c%3: bit c
        if (pos & 1u) lanes[lane] |= bit;
        if (neg & 1u) lanes[kR + lane] |= bit;
      }
    }
  }
}

inline void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  const int64_t words = words_for(k), nblk = layouts::lut3r8_blocks(k);
  const uint32_t* in = static_cast<const uint32_t*>(src);
  for (int64_t r = 0; r < m; ++r) {
    const uint32_t* tile = in + (r / kR) * nblk * 2 * kR;
    for (int64_t wi = 0; wi < words; ++wi) {
      uint32_t word = 0;
      for (int64_t j = wi * 16; j < k && j < wi * 16 + 16; ++j) {
        const uint32_t* lanes = tile + (j / kCols) * 2 * kR;
        const int c = int(j % kCols);
        const int w = int((lanes[r % kR] >> c) & 1u) - int((lanes[kR + r % kR] >> c) & 1u);
        word |= ternary_codes::encode(w, int(j % 16));
      }
      packed[r * words + wi] = word;
    }
  }
}

}  // namespace cpukern::ternary::lut3r8
