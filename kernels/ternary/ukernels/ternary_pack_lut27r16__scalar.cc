// Packer of the lut27r16 layout: per group of 3 columns the base-3 code
// (w0 + 1) + 3 (w1 + 1) + 9 (w2 + 1) in 5 bits, six groups per lane, 16 rows per tile.
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

constexpr int64_t kR = layouts::kLut27r16Rows, kCols = layouts::kLut27r16Cols;
constexpr uint32_t kPow3[3] = {1, 3, 9};

// The lane holding column j of row r, and the code unit of that column in it.
inline int64_t lane_of(int64_t r, int64_t j, int64_t nblk) {
  return (r / kR) * nblk * kR + (j / kCols) * kR + r % kR;
}
inline uint32_t unit_of(int64_t j) { return kPow3[(j % kCols) % 3] << (5 * ((j % kCols) / 3)); }

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  const int64_t words = words_for(k), nblk = layouts::lut27r16_blocks(k);
  uint32_t* out = static_cast<uint32_t*>(dst);
  // Every code starts at 13 (all three weights zero), padding rows and columns included.
  uint32_t zero_codes = 0;
  for (int g = 0; g < kCols / 3; ++g) zero_codes |= 13u << (5 * g);
  const int64_t ntiles = (m + kR - 1) / kR;
  for (int64_t i = 0; i < ntiles * nblk * kR; ++i) out[i] = zero_codes;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int w = ternary_codes::decode(packed[r * words + j / 16], int(j % 16));
      // Weight 0 has digit 1; +1 adds one unit (digit 2), -1 removes one (digit 0).
      if (w != 0) out[lane_of(r, j, nblk)] += w > 0 ? unit_of(j) : 0u - unit_of(j);
    }
}

void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  const int64_t words = words_for(k), nblk = layouts::lut27r16_blocks(k);
  const uint32_t* in = static_cast<const uint32_t*>(src);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t wi = 0; wi < words; ++wi) {
      uint32_t word = 0;
      for (int64_t j = wi * 16; j < k && j < wi * 16 + 16; ++j) {
        const uint32_t code = (in[lane_of(r, j, nblk)] >> (5 * ((j % kCols) / 3))) & 31u;
        const int digit = int(code / kPow3[(j % kCols) % 3] % 3);
        word |= ternary_codes::encode(digit - 1, int(j % 16));
      }
      packed[r * words + wi] = word;
    }
}

}  // namespace

const Packer ternary_pack_lut27r16__scalar = {"ternary_pack_lut27r16__scalar", pack, unpack};

}  // namespace cpukern::ternary
