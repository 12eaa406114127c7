// Packer of the q2b128r4 layout (int8 micro-kernels only: no unpack).
#include "kernels/ternary/ukernels/pack_q2b.h"

namespace cpukern::ternary {

const Packer ternary_pack_q2b128r4__scalar = {"ternary_pack_q2b128r4__scalar", q2b::pack<128, 4>, nullptr};

}  // namespace cpukern::ternary
