// Fused widely-linear micro-kernel, AVX-512F only, layout g4r16x4 (lookup_layout.h): 16 rows
// per tile in the lanes, 4 columns per 16-entry vpermps lookup, all 8 sub-GEMVs (O1-O4, see
// lookup_impl.h) for up to 4 batch rows per pass. No BMI2: the portable packer splits the
// public words.
#include "kernels/widely_linear/ukernels/avx512.h"
#include "kernels/widely_linear/ukernels/lookup_traits.h"

namespace cpukern::widely_linear {

void CPUKERN_UKERNEL(widely_linear_f32_f32_g4r16x4_16x1, avx512)(const Call& c) {
  lookup_impl::fused<G4R16Avx512>(c);
}

}  // namespace cpukern::widely_linear
