// Packer of the b3p5c320 layout (int8 micro-kernels only: no unpack).
#include "kernels/ternary/ukernels/pack_b3p5.h"

namespace cpukern::ternary {

const Packer ternary_pack_b3p5c320__scalar = {"ternary_pack_b3p5c320__scalar", b3p5::pack<320>,
                                              nullptr};

}  // namespace cpukern::ternary
