// Packer of the lut3r8 layout, portable (CPUs without fast pext: AMD Zen 1/2).
#include "kernels/ternary/ukernels/pack_lut3r8.h"

namespace cpukern::ternary {

const Packer ternary_pack_lut3r8__scalar = {"ternary_pack_lut3r8__scalar",
                                            lut3r8::pack<ternary_lookup::SplitPortable>,
                                            lut3r8::unpack<ternary_lookup::JoinPortable>};

}  // namespace cpukern::ternary
