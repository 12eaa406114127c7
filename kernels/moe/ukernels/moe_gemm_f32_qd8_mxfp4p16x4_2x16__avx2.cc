// AVX2 W4A8 micro-kernel (vpmaddubsw + vpmaddwd on ymm, one vpshufb per 32 weights;
// x86_w4a8.h): the W4A8 column of the avx2 row.
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/ukernels/x86_w4a8.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_qd8_mxfp4p16x4_2x16__avx2 =
    make_w4a8_ukernel<x86_w4a8::Tile<x86_w4a8::YmmAvx2>>("moe_gemm_f32_qd8_mxfp4p16x4_2x16__avx2",
                                                         "mxfp4a8p16x4");

}  // namespace cpukern::moe
