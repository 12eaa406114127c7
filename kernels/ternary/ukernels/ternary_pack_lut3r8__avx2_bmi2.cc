// Packer of the lut3r8 layout with BMI2 pext / pdep (chosen at prepare where pext is fast).
#include <immintrin.h>

#include "kernels/ternary/ukernels/pack_lut3r8.h"

namespace cpukern::ternary {
namespace {

void masks(const uint32_t* words, int64_t n, uint16_t* add, uint16_t* sub) {
  for (int64_t i = 0; i < n; ++i) {
    add[i] = uint16_t(_pext_u32(words[i], 0xAAAAAAAAu));
    sub[i] = uint16_t(_pext_u32(words[i], 0x55555555u));
  }
}

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  lut3r8::pack(packed, m, k, dst, masks);
}

void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  lut3r8::unpack(src, m, k, packed, [](uint32_t add, uint32_t sub) {
    return _pdep_u32(add, 0xAAAAAAAAu) | _pdep_u32(sub, 0x55555555u);
  });
}

}  // namespace

const Packer ternary_pack_lut3r8__avx2_bmi2 = {"ternary_pack_lut3r8__avx2_bmi2", pack, unpack};

}  // namespace cpukern::ternary
