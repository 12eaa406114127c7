// int8 ternary GEMV, b3p5c160 layout (1.6 bits/weight), 4-row tiles, AVX2 (vpmaddubsw).
#include "kernels/ternary/ukernels/b3p5.h"

namespace cpukern::ternary {

const I8Ukernel CPUKERN_UKERNEL(ternary_gemv_f32_qd8_b3p5c160_4x1, avx2) =
    b3p5_ukernel<Int8x32, false>(CPUKERN_UKERNEL_NAME(ternary_gemv_f32_qd8_b3p5c160_4x1, avx2));

}  // namespace cpukern::ternary
