// Packer of the b3p5c160 layout (int8 micro-kernels only: no unpack).
#include "kernels/ternary/ukernels/pack_b3p5.h"

namespace cpukern::ternary {

const Packer ternary_pack_b3p5c160__scalar = {"ternary_pack_b3p5c160__scalar", b3p5::pack<160>,
                                              nullptr};

}  // namespace cpukern::ternary
