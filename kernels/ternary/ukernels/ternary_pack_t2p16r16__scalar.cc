// Packer of the t2p16r16 layout: public words interleaved across 16-row tiles (a transpose
// of each tile's 16 x words block).
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

constexpr int64_t kR = layouts::kT2p16r16Rows;

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  const int64_t words = words_for(k);
  uint32_t* out = static_cast<uint32_t*>(dst);
  const int64_t rows = (m + kR - 1) / kR * kR;
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t* lanes = out + (r / kR) * words * kR + r % kR;
    if (r >= m) {  // padding rows
      for (int64_t w = 0; w < words; ++w) lanes[w * kR] = 0;
      continue;
    }
    const uint32_t* in = packed + r * words;
    for (int64_t w = 0; w < words; ++w) lanes[w * kR] = in[w];
  }
}

void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  const int64_t words = words_for(k);
  const uint32_t* in = static_cast<const uint32_t*>(src);
  for (int64_t r = 0; r < m; ++r) {
    const uint32_t* lanes = in + (r / kR) * words * kR + r % kR;
    for (int64_t w = 0; w < words; ++w) packed[r * words + w] = lanes[w * kR];
  }
}

}  // namespace

const Packer ternary_pack_t2p16r16__scalar = {"ternary_pack_t2p16r16__scalar", pack, unpack};

}  // namespace cpukern::ternary
