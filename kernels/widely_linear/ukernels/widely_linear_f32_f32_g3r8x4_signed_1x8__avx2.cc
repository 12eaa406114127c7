// Widely-linear micro-kernel for 2..4 batch rows, layout g3r8x4 (lookup_layout.h): signed
// tables, one weight row per ymm (signed_impl.h), bitwise equal to the 1-row kernel; AVX2 + FMA.
#include "kernels/widely_linear/ukernels/lookup_traits.h"

namespace cpukern::widely_linear {

void widely_linear_f32_f32_g3r8x4_signed_1x8__avx2(const Call& c) {
  signed_impl::fused<G3R8Avx2, 2, 128>(c);
}

}  // namespace cpukern::widely_linear
