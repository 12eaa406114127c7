// Fused widely-linear micro-kernel, AVX-512F only, layout g4r16x4 (lookup_layout.h): 16 rows
// per tile in the lanes, 4 columns per 16-entry vpermps lookup, all 8 sub-GEMVs (O1-O4, see
// lookup_impl.h) for up to 4 batch rows per pass. No BMI2: the portable packer splits the
// public words.
#include "kernels/widely_linear/ukernels/g4r16_avx512.h"

namespace cpukern::widely_linear {

CPUKERN_WL_FUSED(widely_linear_f32_g4r16x4_16x1__avx512) { lookup_impl::fused<G4R16Avx512>(c); }

// 2..4 batch rows: signed tables, one weight row per ymm (signed_impl.h); bitwise equal.
CPUKERN_WL_FUSED(widely_linear_f32_g4r16x4_signed_1x8__avx512) { signed_impl::fused<G4R16Avx512, 2, 256>(c); }

}  // namespace cpukern::widely_linear
