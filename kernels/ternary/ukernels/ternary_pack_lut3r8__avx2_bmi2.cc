// Packer of the lut3r8 layout with BMI2 pext / pdep (chosen at prepare where pext is fast).
#include "kernels/ternary/ukernels/pack_lut3r8.h"

namespace cpukern::ternary {

const Packer ternary_pack_lut3r8__avx2_bmi2 = {
    "ternary_pack_lut3r8__avx2_bmi2", lut3r8::pack<ternary_lookup::SplitPext>,
    lut3r8::unpack<ternary_lookup::JoinPdep>};

}  // namespace cpukern::ternary
