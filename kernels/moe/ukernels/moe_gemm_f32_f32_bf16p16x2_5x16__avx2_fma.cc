// AVX2 + FMA micro-kernel on bf16 weights: 5 rows x 16 columns of fp32 accumulators, bf16
// weights widened in registers (the tile: avx2_fma_bf16.h, shared with the MXFP4 kernel).
#include "kernels/moe/ukernels/avx2_fma_bf16.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_f32_bf16p16x2_5x16__avx2_fma =
    make_ukernel<avx2::Tile<avx2::Bf16Src>>("moe_gemm_f32_f32_bf16p16x2_5x16__avx2_fma",
                                            "bf16p16x2");

}  // namespace cpukern::moe
