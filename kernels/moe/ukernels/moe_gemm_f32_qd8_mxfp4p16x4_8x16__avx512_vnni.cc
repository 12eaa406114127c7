// AVX-512 VNNI W4A8 micro-kernel (vpdpbusd on zmm, one vpshufb per 64 weights; x86_w4a8.h):
// the W4A8 column of the avx512_bf16 row (every AVX512_BF16 CPU has AVX512_VNNI). Compiled
// natively and, with CPUKERN_SIMDE, against SIMDe (the simde row, tests on any host).
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/ukernels/x86_w4a8.h"

#if defined(CPUKERN_SIMDE)
#define CPUKERN_UK moe_gemm_f32_qd8_mxfp4p16x4_8x16__simde_avx512_vnni
#else
#define CPUKERN_UK moe_gemm_f32_qd8_mxfp4p16x4_8x16__avx512_vnni
#endif
#define CPUKERN_STR2(x) #x
#define CPUKERN_STR(x) CPUKERN_STR2(x)

namespace cpukern::moe {

const Ukernel CPUKERN_UK =
    make_w4a8_ukernel<x86_w4a8::Tile<x86_w4a8::Zmm>>(CPUKERN_STR(CPUKERN_UK), "mxfp4a8p16x4");

}  // namespace cpukern::moe
