// AArch64 NEON (no BF16) micro-kernel on MXFP4 weights: the bf16 kernel's FMA tile
// (neon_fma_bf16.h) with the weights decoded in registers (neon_fma_mxfp4.h: tbl -> fp16 ->
// fp32, times 2**(s - 127)).
#include "kernels/moe/ukernels/neon_fma_mxfp4.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_f32_mxfp4p16_4x16__neon_fma =
    make_ukernel<neonfma::Mxfp4Tile>("moe_gemm_f32_f32_mxfp4p16_4x16__neon_fma", "mxfp4p16");

}  // namespace cpukern::moe
