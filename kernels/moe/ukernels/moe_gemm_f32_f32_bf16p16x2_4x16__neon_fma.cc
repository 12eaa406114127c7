// AArch64 NEON micro-kernel for CPUs without BF16 on bf16 weights: fp32 FMA by lane, 4 rows x
// 16 columns (the tile: neon_fma_bf16.h, shared with the MXFP4 kernel).
#include "kernels/moe/ukernels/neon_fma_bf16.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_f32_bf16p16x2_4x16__neon_fma =
    make_ukernel<neonfma::Tile<neonfma::Bf16Src>>("moe_gemm_f32_f32_bf16p16x2_4x16__neon_fma",
                                                  "bf16p16x2");

}  // namespace cpukern::moe
