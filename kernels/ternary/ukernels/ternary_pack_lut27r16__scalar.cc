// Packer of the lut27r16 layout: per group of 3 columns the base-3 code
// (w0 + 1) + 3 (w1 + 1) + 9 (w2 + 1) in 5 bits, six groups per lane, 16 rows per tile.
// A block of 18 columns is bits [36b, 36b + 36) of the row's code stream: one 8-byte read,
// then one lookup per two groups of 3 columns (12 bits of public codes -> two 5-bit codes,
// an 8 KiB table).
#include <vector>

#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/pack_rows.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

constexpr int64_t kR = layouts::kLut27r16Rows, kCols = layouts::kLut27r16Cols;
constexpr int kGroups = int(kCols / 3);
static_assert(kGroups == 6, "pack reads a lane as three 12-bit lookups");
constexpr uint32_t kZeroCode = 13;  // three zero weights

constexpr uint32_t base3_code(uint32_t codes) {  // 3 public codes -> (w0+1) + 3(w1+1) + 9(w2+1)
  return uint32_t(ternary_codes::decode(codes, 0) + 1) +
         3 * uint32_t(ternary_codes::decode(codes, 1) + 1) +
         9 * uint32_t(ternary_codes::decode(codes, 2) + 1);
}

struct Tables {
  uint16_t to_codes[4096] = {};  // 6 public codes -> two base-3 codes (bits 0-4, 5-9)
  uint16_t to_public[1024] = {};  // two base-3 codes -> 6 public codes (codes >= 27: none)
  uint32_t zero_lane = 0;        // six groups of three zeros
  constexpr Tables() {
    for (uint32_t b = 0; b < 4096; ++b)
      to_codes[b] = uint16_t(base3_code(b & 63) | base3_code(b >> 6) << 5);
    uint32_t one[32] = {};
    for (uint32_t b = 0; b < 64; ++b)
      if (ternary_codes::invalid_codes(b) == 0) one[base3_code(b)] = b;
    for (uint32_t c = 0; c < 1024; ++c) to_public[c] = uint16_t(one[c & 31] | one[c >> 5] << 6);
    for (int g = 0; g < kGroups; ++g) zero_lane |= kZeroCode << (5 * g);
  }
};
inline constexpr Tables kTables{};

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  const int64_t words = words_for(k), nblk = layouts::lut27r16_blocks(k);
  pack_rows::RowBuffer row(words * 4);
  // Padding rows: zero weights.
  pack_rows::tile_rows<uint32_t>(
      m, nblk, kR, static_cast<uint32_t*>(dst), kTables.zero_lane, [&](int64_t r, uint32_t* lanes) {
        const uint8_t* s = row.load(packed + r * words);
        for (int64_t b = 0; b < nblk; ++b) {
          const uint64_t f = pack_rows::bits_at(s, b * 2 * kCols);
          lanes[b * kR] = uint32_t(kTables.to_codes[f & 4095]) |
                          uint32_t(kTables.to_codes[(f >> 12) & 4095]) << 10 |
                          uint32_t(kTables.to_codes[(f >> 24) & 4095]) << 20;
        }
      });
}

// The lanes' 36-bit fields are appended to a bit accumulator in a register; every 16 bits
// make half a public word.
void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  const int64_t words = words_for(k), nblk = layouts::lut27r16_blocks(k);
  const uint32_t* in = static_cast<const uint32_t*>(src);
  for (int64_t r = 0; r < m; ++r) {
    const uint32_t* lanes = in + (r / kR) * nblk * kR + r % kR;
    uint8_t* row = reinterpret_cast<uint8_t*>(packed + r * words);
    const int64_t halves = words * 2;
    uint64_t acc = 0;  // pending bits, `pending` of them (< 16 between blocks)
    int pending = 0;
    int64_t h = 0;
    for (int64_t b = 0; b < nblk; ++b) {
      const uint32_t lane = lanes[b * kR];
      acc |= (uint64_t(kTables.to_public[lane & 1023]) |
              uint64_t(kTables.to_public[(lane >> 10) & 1023]) << 12 |
              uint64_t(kTables.to_public[(lane >> 20) & 1023]) << 24)
             << pending;
      for (pending += int(2 * kCols); pending >= 16 && h < halves; pending -= 16, acc >>= 16) {
        const uint16_t v = uint16_t(acc);
        std::memcpy(row + 2 * h++, &v, 2);
      }
    }
    for (; h < halves; ++h, acc >>= 16) {  // the tail past the last block's columns: zero
      const uint16_t v = uint16_t(acc);
      std::memcpy(row + 2 * h, &v, 2);
    }
  }
}

}  // namespace

const Packer ternary_pack_lut27r16__scalar = {"ternary_pack_lut27r16__scalar", pack, unpack};

}  // namespace cpukern::ternary
