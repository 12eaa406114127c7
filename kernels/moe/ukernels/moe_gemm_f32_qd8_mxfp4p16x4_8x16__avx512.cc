// AVX-512 BW W4A8 micro-kernel without VNNI (vpmaddubsw + vpmaddwd on zmm, one vpshufb per 64
// weights; x86_w4a8.h): the W4A8 column of the avx512 row. Compiled natively and, with
// CPUKERN_SIMDE, against SIMDe (the simde_avx512 row, tests on any host).
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/ukernels/x86_w4a8.h"

namespace cpukern::moe {

const Ukernel CPUKERN_UKERNEL(moe_gemm_f32_qd8_mxfp4p16x4_8x16, avx512) =
    make_w4a8_ukernel<x86_w4a8::Tile<x86_w4a8::ZmmBw>>(
        CPUKERN_UKERNEL_NAME(moe_gemm_f32_qd8_mxfp4p16x4_8x16, avx512), "mxfp4a8p16x4");

}  // namespace cpukern::moe
