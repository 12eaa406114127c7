// The BFMMLA 8x12 micro-kernel on MXFP4 weights: the bf16 kernel's tile (neon_bfmmla_bf16.h) with
// each B operand decoded in registers (tbl -> fp16 -> fp32 x 2**(s - 127) -> bf16, exact).
#include "kernels/moe/ukernels/neon_bfmmla_mxfp4.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_bf16p8x4_mxfp4p12x4_8x12__neon_bfmmla =
    make_ukernel<bfmmla::Mxfp4Tile<6>>("moe_gemm_f32_bf16p8x4_mxfp4p12x4_8x12__neon_bfmmla",
                                       "mxfp4p12x4");

}  // namespace cpukern::moe
