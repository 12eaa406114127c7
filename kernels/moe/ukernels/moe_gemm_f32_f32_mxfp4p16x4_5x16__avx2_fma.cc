// AVX2 + FMA micro-kernel on MXFP4 weights: the bf16 kernel's tile (avx2_fma.h) with the
// weights decoded in registers (vpshufb table -> int8 2e -> fp32, times 2**(s - 128)).
#include "kernels/moe/ukernels/avx2_fma.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_f32_mxfp4p16x4_5x16__avx2_fma =
    make_ukernel<avx2::Mxfp4Tile>("moe_gemm_f32_f32_mxfp4p16x4_5x16__avx2_fma", "mxfp4p16x4");

}  // namespace cpukern::moe
