// Fused widely-linear micro-kernel for AArch64 NEON (ARMv8.0), public layout: one row per
// step, 4 columns per vector, all 8 sub-GEMVs from one decode per plane and 4 columns
// (O1-O4, see t2p16_neon.h), up to 4 batch rows per pass.
#include "kernels/widely_linear/ukernels/t2p16_neon.h"

namespace cpukern::widely_linear {

void widely_linear_f32_f32_t2p16x4_1x1__neon(const Call& c) { t2p16_neon::fused(c); }

}  // namespace cpukern::widely_linear
