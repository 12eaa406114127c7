// int8 ternary GEMV, b3p5c320 layout, 4-row tiles, AVX-512BW + VNNI (vpdpbusd zmm at batch
// 1). Compiled natively and, with CPUKERN_SIMDE, against SIMDe.
#include "kernels/ternary/ukernels/b3p5.h"

namespace cpukern::ternary {

const I8Ukernel CPUKERN_UKERNEL(ternary_gemv_f32_qd8_b3p5c320_4x1, avx512_vnni) =
    b3p5_ukernel<Int8x64, true>(CPUKERN_UKERNEL_NAME(ternary_gemv_f32_qd8_b3p5c320_4x1, avx512_vnni));

}  // namespace cpukern::ternary
