// One sub-GEMV (plane . source table) of the naive unfused schedule over the g3r8x4 bytes,
// summed in the fused kernel's order (identical results), up to 4 batch rows per pass.
#include "kernels/widely_linear/ukernels/lookup_traits.h"

namespace cpukern::widely_linear {

void widely_linear_f32_f32_g3r8x4_gemv_8x1__avx2(const Call& c) { lookup_impl::gemv<G3R8Avx2>(c); }

}  // namespace cpukern::widely_linear
