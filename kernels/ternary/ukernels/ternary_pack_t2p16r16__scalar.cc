// Packer of the t2p16r16 layout: public words interleaved across 16-row tiles (a transpose
// of each tile's 16 x words block).
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/pack_rows.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

constexpr int64_t kR = layouts::kT2p16r16Rows;

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  const int64_t words = words_for(k);
  pack_rows::tile_rows<uint32_t>(m, words, kR, static_cast<uint32_t*>(dst), 0,
                                 [&](int64_t r, uint32_t* lanes) {
                                   const uint32_t* in = packed + r * words;
                                   for (int64_t w = 0; w < words; ++w) lanes[w * kR] = in[w];
                                 });
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
