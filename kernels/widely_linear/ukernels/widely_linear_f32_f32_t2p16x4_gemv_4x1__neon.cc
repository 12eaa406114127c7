// One sub-GEMV (plane . source) of the naive unfused schedule for AArch64 NEON over the same
// public-layout bytes, summed in the fused kernel's order (identical results), 4 rows at a
// time (t2p16_neon.h).
#include "kernels/widely_linear/ukernels/t2p16_neon.h"

namespace cpukern::widely_linear {

void widely_linear_f32_f32_t2p16x4_gemv_4x1__neon(const Call& c) { t2p16_neon::gemv(c); }

}  // namespace cpukern::widely_linear
