// int8 ternary GEMV, q2b128r4 layout (4 rows interleaved), 4-row tiles, AVX2 (vpmaddubsw).
#include "kernels/ternary/ukernels/q2b.h"

namespace cpukern::ternary {

const I8Ukernel CPUKERN_UKERNEL(ternary_gemv_f32_qd8_q2b128r4_4x1, avx2) =
    q2b_ukernel<Int8x32, false, 4>(CPUKERN_UKERNEL_NAME(ternary_gemv_f32_qd8_q2b128r4_4x1, avx2));

}  // namespace cpukern::ternary
