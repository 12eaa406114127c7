// The g3r8x4 packer of the avx2_bmi2 row: the public words are split into their 16-bit
// "+1" / "-1" masks with pext (two instructions instead of the portable unshuffle); the
// bytes are identical to g3r8::pack's (tested).
#include <immintrin.h>

#include "kernels/widely_linear/ukernels/lookup_layout.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear::g3r8 {
namespace {

struct SplitPext {
  static uint32_t pos(uint32_t w) { return _pext_u32(w, 0xAAAAAAAAu); }
  static uint32_t neg(uint32_t w) { return _pext_u32(w, 0x55555555u); }
};

}  // namespace

void pack_bmi2(const uint32_t* planes, const Dims& d, void* out) {
  lookup::pack_lanes<SplitPext>(lookup::kG3R8, planes, d, out);
}

}  // namespace cpukern::widely_linear::g3r8
