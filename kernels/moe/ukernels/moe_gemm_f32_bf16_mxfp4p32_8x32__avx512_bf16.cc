// AVX-512 BF16 micro-kernel on MXFP4 weights: the bf16 kernel's vdpbf16ps tile (avx512_bf16.h)
// with each k pair's 32 columns decoded in registers to the bf16 pair words it consumes.
#include "kernels/moe/ukernels/avx512_bf16.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_bf16_mxfp4p32_8x32__avx512_bf16 =
    make_ukernel<avx512bf16::Mxfp4Tile>("moe_gemm_f32_bf16_mxfp4p32_8x32__avx512_bf16",
                                        "mxfp4p32");

}  // namespace cpukern::moe
