// The AArch64 BFMMLA micro-kernel (the vLLM PR's design): 8 rows x 8 columns, 4 row pairs x
// 4 column pairs = 16 float32x4 accumulators each holding a 2x2 block of C; blocks of at most
// 4 rows take 2 row pairs x two 8-column panels (4x16, 16 accumulators). bf16 inputs, fp32
// accumulation, K consumed 4 at a time.
#include "kernels/moe/ukernels/neon_bfmmla_bf16.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_bf16p8x4_bf16p8x4_8x8__neon_bfmmla =
    make_ukernel<bfmmla::Tile<4>>("moe_gemm_f32_bf16p8x4_bf16p8x4_8x8__neon_bfmmla", "bf16p8x4");

}  // namespace cpukern::moe
