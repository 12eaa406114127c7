// AVX2 + FMA micro-kernel on MXFP4 weights (avx2_fma_mxfp4.h): the bf16 kernel's FMA order, the
// weights decoded in registers for one row block (vpshufb tables -> fp32) and, for several,
// once per K block into exact fp32 weights that a 6x16 tile reads as FMA operands.
#include "kernels/moe/ukernels/avx2_fma_mxfp4.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_f32_mxfp4p16x4_5x16__avx2_fma =
    make_ukernel<avx2::Mxfp4Tile>("moe_gemm_f32_f32_mxfp4p16x4_5x16__avx2_fma", "mxfp4p16x4");

}  // namespace cpukern::moe
