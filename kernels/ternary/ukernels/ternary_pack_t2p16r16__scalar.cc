// Packer of the t2p16r16 layout: public words interleaved across 16-row tiles.
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

constexpr int64_t kR = layouts::kT2p16r16Rows;

// Index of word w of row r in the layout.
inline int64_t at(int64_t r, int64_t w, int64_t words) {
  return (r / kR) * words * kR + w * kR + r % kR;
}

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  const int64_t words = words_for(k);
  uint32_t* out = static_cast<uint32_t*>(dst);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t w = 0; w < words; ++w) out[at(r, w, words)] = packed[r * words + w];
}

void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  const int64_t words = words_for(k);
  const uint32_t* in = static_cast<const uint32_t*>(src);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t w = 0; w < words; ++w) packed[r * words + w] = in[at(r, w, words)];
}

}  // namespace

const Packer ternary_pack_t2p16r16__scalar = {"ternary_pack_t2p16r16__scalar", pack, unpack};

}  // namespace cpukern::ternary
