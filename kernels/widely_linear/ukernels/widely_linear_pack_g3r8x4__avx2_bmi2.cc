// The g3r8x4 packer for CPUs with fast pext: the public words are split into their 16-bit
// "+1" / "-1" masks with two pext instead of the portable unshuffle; the bytes are
// identical to widely_linear_pack_g3r8x4__scalar's (tested). prepare() picks it for the
// avx2 row where the CPU has isa::avx2_bmi2.
#include "kernels/widely_linear/ukernels/lookup_layout.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

void widely_linear_pack_g3r8x4__avx2_bmi2(const uint32_t* planes, const Dims& d, void* out) {
  lookup::pack_lanes<ternary_lookup::SplitPext>(lookup::kG3R8, planes, d, out);
}

}  // namespace cpukern::widely_linear
