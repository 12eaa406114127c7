// Fused widely-linear micro-kernel, layout g3r8x4 (lookup_layout.h): 8 rows per tile in the
// lanes, 3 columns per vpermps lookup, all 8 sub-GEMVs (O1-O4, see lookup_impl.h) for up to
// 4 batch rows per pass. AVX2 + FMA only (no BMI2: the fast path for AMD Zen 1/2, whose pext
// is microcoded); the packer is chosen at prepare time (ukernels.inc).
#include "kernels/widely_linear/ukernels/lookup_traits.h"

namespace cpukern::widely_linear {

void widely_linear_f32_f32_g3r8x4_8x1__avx2(const Call& c) { lookup_impl::fused<G3R8Avx2>(c); }

}  // namespace cpukern::widely_linear
