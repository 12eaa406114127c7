// Widely-linear micro-kernel for 2..4 batch rows, layout g4r16x4 (lookup_layout.h): signed
// tables, one weight row per ymm (signed_impl.h), bitwise equal to the 1-row kernel;
// AVX-512F, natively or against SIMDe.
#include "kernels/widely_linear/ukernels/avx512.h"
#include "kernels/widely_linear/ukernels/lookup_traits.h"

namespace cpukern::widely_linear {

void CPUKERN_UKERNEL(widely_linear_f32_f32_g4r16x4_signed_1x8, avx512)(const Call& c) {
  signed_impl::fused<G4R16Avx512, 2, 256>(c);
}

}  // namespace cpukern::widely_linear
