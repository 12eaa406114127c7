// The public layout's packer: a copy.
#include <cstring>

#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

void widely_linear_pack_t2p16x4__scalar(const uint32_t* planes, const Dims& d, void* out) {
  std::memcpy(out, planes, layouts::t2p16x4.packed_size(d));
}

}  // namespace cpukern::widely_linear
