// AVX-VNNI W4A8 micro-kernel (vpdpbusd on ymm, one vpshufb per 32 weights; x86_w4a8.h): the
// W4A8 column of the avx_vnni row. Compiled natively and, with CPUKERN_SIMDE, against SIMDe
// (the simde row, tests on any host).
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/ukernels/x86_w4a8.h"

#if defined(CPUKERN_SIMDE)
#define CPUKERN_UK moe_gemm_f32_qd8_mxfp4p16x4_2x16__simde_avx_vnni
#else
#define CPUKERN_UK moe_gemm_f32_qd8_mxfp4p16x4_2x16__avx_vnni
#endif
#define CPUKERN_STR2(x) #x
#define CPUKERN_STR(x) CPUKERN_STR2(x)

namespace cpukern::moe {

const Ukernel CPUKERN_UK =
    make_w4a8_ukernel<x86_w4a8::Tile<x86_w4a8::YmmVnni>>(CPUKERN_STR(CPUKERN_UK), "mxfp4a8p16x4");

}  // namespace cpukern::moe
