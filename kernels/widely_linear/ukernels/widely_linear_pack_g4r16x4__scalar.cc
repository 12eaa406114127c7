// The portable g4r16x4 packer.
#include "kernels/widely_linear/ukernels/lookup_layout.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

void widely_linear_pack_g4r16x4__scalar(const uint32_t* planes, const Dims& d, void* out) {
  lookup::pack_lanes<ternary_lookup::SplitPortable>(lookup::kG4R16, planes, d, out);
}

}  // namespace cpukern::widely_linear
