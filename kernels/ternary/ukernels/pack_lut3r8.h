// The lut3r8 packer body, shared by its packer files, which differ only in how they split a
// row of public words into 16-bit add / subtract masks and merge them back (portable shifts
// and tables, or BMI2 pext / pdep).
// A lane of block b is then bits [30b, 30b + 30) of the row's add (or subtract) mask stream:
// one unaligned 8-byte read per lane instead of a loop over weights.
#pragma once
#include <vector>

#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/pack_rows.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary::lut3r8 {

constexpr int64_t kR = layouts::kLut3r8Rows, kCols = layouts::kLut3r8Cols;
constexpr uint32_t kLaneMask = (1u << kCols) - 1u;
constexpr int64_t kPadMasks = pack_rows::kPadBytes / 2;  // zero uint16 past a mask stream

// masks(words, n, add, sub): add[i] / sub[i] = the +1 / -1 bits of words[i] (bit j = weight j).
// Writes every byte of the layout for rows [0, m) (padding lanes and rows are zero).
template <class Masks>
void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst, Masks masks) {
  const int64_t words = words_for(k), nblk = layouts::lut3r8_blocks(k);
  uint32_t* out = static_cast<uint32_t*>(dst);
  std::vector<uint16_t> add(size_t(words + kPadMasks)), sub(add.size());
  const int64_t rows = (m + kR - 1) / kR * kR;
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t* lanes = out + (r / kR) * nblk * 2 * kR + r % kR;
    if (r >= m) {
      for (int64_t b = 0; b < nblk; ++b) lanes[b * 2 * kR] = lanes[b * 2 * kR + kR] = 0;
      continue;
    }
    masks(packed + r * words, words, add.data(), sub.data());
    for (int64_t b = 0; b < nblk; ++b) {
      lanes[b * 2 * kR] = uint32_t(pack_rows::bits_at(add.data(), b * kCols)) & kLaneMask;
      lanes[b * 2 * kR + kR] = uint32_t(pack_rows::bits_at(sub.data(), b * kCols)) & kLaneMask;
    }
  }
}

// Public byte pairs from 8 add bits and 8 subtract bits: the portable spread (the inverse of
// the masks) is two lookups per byte instead of the 10-op bit spread.
struct SpreadTable {
  uint16_t even[256] = {};  // bit j -> bit 2j
  constexpr SpreadTable() {
    for (uint32_t b = 0; b < 256; ++b) even[b] = uint16_t(pack_rows::spread_to_even_bits(b));
  }
};
inline constexpr SpreadTable kSpread{};

inline uint32_t word_of_masks(uint32_t add, uint32_t sub) {
  const uint32_t even = uint32_t(kSpread.even[sub & 255]) | uint32_t(kSpread.even[(sub >> 8) & 255]) << 16;
  const uint32_t odd = uint32_t(kSpread.even[add & 255]) | uint32_t(kSpread.even[(add >> 8) & 255]) << 16;
  return odd << 1 | even;
}

// The lanes' 30-bit fields are appended to two bit accumulators (add, subtract) in
// registers; every 16 bits make one public word, word(add16, sub16).
template <class Word>
void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed, Word word) {
  const int64_t words = words_for(k), nblk = layouts::lut3r8_blocks(k);
  const uint32_t* in = static_cast<const uint32_t*>(src);
  for (int64_t r = 0; r < m; ++r) {
    const uint32_t* lanes = in + (r / kR) * nblk * 2 * kR + r % kR;
    uint32_t* row = packed + r * words;
    uint64_t add = 0, sub = 0;  // pending bits, `pending` of them (< 16 between blocks)
    int pending = 0;
    int64_t wi = 0;
    for (int64_t b = 0; b < nblk; ++b) {
      add |= uint64_t(lanes[b * 2 * kR] & kLaneMask) << pending;
      sub |= uint64_t(lanes[b * 2 * kR + kR] & kLaneMask) << pending;
      for (pending += int(kCols); pending >= 16 && wi < words; pending -= 16, add >>= 16, sub >>= 16)
        row[wi++] = word(uint32_t(add) & 0xFFFFu, uint32_t(sub) & 0xFFFFu);
    }
    if (wi < words)  // the last word's columns past the last block's: none set
      row[wi] = word(uint32_t(add) & 0xFFFFu, uint32_t(sub) & 0xFFFFu);
  }
}

}  // namespace cpukern::ternary::lut3r8
