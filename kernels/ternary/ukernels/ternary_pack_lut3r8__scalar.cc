// Packer of the lut3r8 layout, portable (CPUs without fast pext: AMD Zen 1/2).
#include "kernels/ternary/ukernels/pack_lut3r8.h"

namespace cpukern::ternary {
namespace {

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  lut3r8::pack(packed, m, k, dst, [](uint32_t word, uint32_t* pos, uint32_t* neg) {
    *pos = ternary_codes::add_mask(word);
    *neg = ternary_codes::sub_mask(word);
  });
}

}  // namespace

const Packer ternary_pack_lut3r8__scalar = {"ternary_pack_lut3r8__scalar", pack, lut3r8::unpack};

}  // namespace cpukern::ternary
