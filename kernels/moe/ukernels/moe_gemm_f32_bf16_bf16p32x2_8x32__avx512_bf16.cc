// AVX-512 BF16 micro-kernel on bf16 weights: vdpbf16ps, 8 rows x 32 columns (the tile:
// avx512_bf16.h, shared with the MXFP4 kernel).
#include "kernels/moe/ukernels/avx512_bf16.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_bf16_bf16p32x2_8x32__avx512_bf16 =
    make_ukernel<avx512bf16::Tile<avx512bf16::Bf16Src>>(
        "moe_gemm_f32_bf16_bf16p32x2_8x32__avx512_bf16", "bf16p32x2");

}  // namespace cpukern::moe
