// int8 ternary GEMV, q2b256r4 layout (4 rows interleaved), 4-row tiles, AVX-512BW + VNNI
// (vpdpbusd zmm at batch 1). Compiled natively (avx512_vnni flags) and, with CPUKERN_SIMDE,
// against SIMDe.
#include "kernels/ternary/ukernels/q2b.h"

namespace cpukern::ternary {

const I8Ukernel CPUKERN_UKERNEL(ternary_gemv_f32_qd8_q2b256r4_4x1, avx512_vnni) =
    q2b_ukernel<Int8x64, true, 4>(CPUKERN_UKERNEL_NAME(ternary_gemv_f32_qd8_q2b256r4_4x1, avx512_vnni));

}  // namespace cpukern::ternary
