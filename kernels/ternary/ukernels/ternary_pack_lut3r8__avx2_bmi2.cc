// Packer of the lut3r8 layout with BMI2 pext (chosen at prepare where pext is fast).
#include <immintrin.h>

#include "kernels/ternary/ukernels/pack_lut3r8.h"

namespace cpukern::ternary {
namespace {

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  lut3r8::pack(packed, m, k, dst, [](uint32_t word, uint32_t* pos, uint32_t* neg) {
    *pos = _pext_u32(word, 0xAAAAAAAAu);
    *neg = _pext_u32(word, 0x55555555u);
  });
}

}  // namespace

const Packer ternary_pack_lut3r8__avx2_bmi2 = {"ternary_pack_lut3r8__avx2_bmi2", pack,
                                               lut3r8::unpack};

}  // namespace cpukern::ternary
