// Packer of the lut4r16 layout (layouts.h), portable; read by the NEON fp32 micro-kernel.
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

constexpr int64_t kR = layouts::kLut4r16Rows, kC = layouts::kLut4r16Cols;

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  const int64_t words = words_for(k), groups = layouts::lut4r16_groups(k);
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* tile = out + (r / kR) * groups * kR;
    for (int64_t j = 0; j < k; ++j) {
      const int w = ternary_codes::decode(packed[r * words + j / 16], int(j % 16));
      if (w == 0) continue;
      const int bit = int(j % kC) + (w < 0 ? 4 : 0);
      tile[(j / kC) * kR + r % kR] |= uint8_t(1u << bit);
    }
  }
}

void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  const int64_t words = words_for(k), groups = layouts::lut4r16_groups(k);
  const uint8_t* in = static_cast<const uint8_t*>(src);
  for (int64_t r = 0; r < m; ++r) {
    const uint8_t* tile = in + (r / kR) * groups * kR;
    for (int64_t wi = 0; wi < words; ++wi) {
      uint32_t word = 0;
      for (int64_t j = wi * 16; j < k && j < wi * 16 + 16; ++j) {
        const unsigned byte = tile[(j / kC) * kR + r % kR];
        const int c = int(j % kC);
        const int w = int((byte >> c) & 1u) - int((byte >> (c + 4)) & 1u);
        word |= ternary_codes::encode(w, int(j % 16));
      }
      packed[r * words + wi] = word;
    }
  }
}

}  // namespace

const Packer ternary_pack_lut4r16__scalar = {"ternary_pack_lut4r16__scalar", pack, unpack};

}  // namespace cpukern::ternary
