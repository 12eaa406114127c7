// Packer of the q2b128 layout (int8 micro-kernels only: no unpack).
#include "kernels/ternary/ukernels/pack_q2b.h"

namespace cpukern::ternary {

const Packer ternary_pack_q2b128__scalar = {"ternary_pack_q2b128__scalar", q2b::pack<128>, nullptr};

}  // namespace cpukern::ternary
