// The portable g3r8x4 packer (no BMI2: the avx2 row's packer on AMD Zen 1/2).
#include "kernels/widely_linear/ukernels/lookup_layout.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

void widely_linear_pack_g3r8x4__scalar(const uint32_t* planes, const Dims& d, void* out) {
  lookup::pack_lanes<ternary_lookup::SplitPortable>(lookup::kG3R8, planes, d, out);
}

}  // namespace cpukern::widely_linear
