// Packer of the lut3r8 layout, portable (CPUs without fast pext: AMD Zen 1/2).
#include "kernels/ternary/ukernels/pack_lut3r8.h"

namespace cpukern::ternary {
namespace {

void masks(const uint32_t* words, int64_t n, uint16_t* add, uint16_t* sub) {
  for (int64_t i = 0; i < n; ++i) {
    add[i] = uint16_t(ternary_codes::add_mask(words[i]));
    sub[i] = uint16_t(ternary_codes::sub_mask(words[i]));
  }
}

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  lut3r8::pack(packed, m, k, dst, masks);
}

void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  lut3r8::unpack(src, m, k, packed, lut3r8::word_of_masks);
}

}  // namespace

const Packer ternary_pack_lut3r8__scalar = {"ternary_pack_lut3r8__scalar", pack, unpack};

}  // namespace cpukern::ternary
