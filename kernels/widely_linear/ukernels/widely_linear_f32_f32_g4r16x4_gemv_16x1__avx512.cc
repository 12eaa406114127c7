// One sub-GEMV (plane . source table) of the naive unfused schedule over the g4r16x4 bytes,
// AVX-512F, summed in the fused kernel's order (identical results), up to 4 batch rows.
#include "kernels/widely_linear/ukernels/avx512.h"
#include "kernels/widely_linear/ukernels/lookup_traits.h"

namespace cpukern::widely_linear {

void CPUKERN_UKERNEL(widely_linear_f32_f32_g4r16x4_gemv_16x1, avx512)(const Call& c) {
  lookup_impl::gemv<G4R16Avx512>(c);
}

}  // namespace cpukern::widely_linear
