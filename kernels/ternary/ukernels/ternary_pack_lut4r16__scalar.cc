// Packer of the lut4r16 layout (layouts.h), portable; read by the NEON fp32 micro-kernel.
// A group of 4 columns is one public byte, so each layout byte is one table lookup.
#include <cstring>

#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/pack_rows.h"
#include "kernels/ternary/ukernels/ukernels.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "public words are read as bytes");

namespace cpukern::ternary {
namespace {

constexpr int64_t kR = layouts::kLut4r16Rows;

// Public byte <-> layout byte (add pattern in bits 0-3, subtract pattern in bits 4-7).
struct Tables {
  uint8_t to_layout[256] = {}, to_public[256] = {};
  constexpr Tables() {
    for (int b = 0; b < 256; ++b) {
      int l = 0;
      for (int c = 0; c < 4; ++c) {
        const int w = ternary_codes::decode(uint32_t(b), c);
        l |= w > 0 ? 1 << c : w < 0 ? 16 << c : 0;
      }
      to_layout[b] = uint8_t(l);
      if (ternary_codes::invalid_codes(uint32_t(b)) == 0) to_public[l] = uint8_t(b);
    }
  }
};
inline constexpr Tables kTables{};

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  const int64_t words = words_for(k), groups = layouts::lut4r16_groups(k);
  pack_rows::tile_rows<uint8_t>(m, groups, kR, static_cast<uint8_t*>(dst), 0,
                                [&](int64_t r, uint8_t* lanes) {
                                  const uint8_t* s = reinterpret_cast<const uint8_t*>(packed + r * words);
                                  for (int64_t g = 0; g < groups; ++g)
                                    lanes[g * kR] = kTables.to_layout[s[g]];
                                });
}

void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  const int64_t words = words_for(k), groups = layouts::lut4r16_groups(k);
  const uint8_t* in = static_cast<const uint8_t*>(src);
  for (int64_t r = 0; r < m; ++r) {
    const uint8_t* lanes = in + (r / kR) * groups * kR + r % kR;
    uint8_t* d = reinterpret_cast<uint8_t*>(packed + r * words);
    for (int64_t g = 0; g < groups; ++g) d[g] = kTables.to_public[lanes[g * kR]];
    std::memset(d + groups, 0, size_t(words * 4 - groups));
  }
}

}  // namespace

const Packer ternary_pack_lut4r16__scalar = {"ternary_pack_lut4r16__scalar", pack, unpack};

}  // namespace cpukern::ternary
