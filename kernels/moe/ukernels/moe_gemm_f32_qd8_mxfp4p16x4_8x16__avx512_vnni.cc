// AVX-512 VNNI W4A8 micro-kernel (vpdpbusd on zmm, one vpshufb per 64 weights; x86_w4a8.h):
// the W4A8 column of the avx512_vnni, avx512_bf16 and amx rows (every AVX512_BF16 CPU has
// AVX512_VNNI; the library ukernels_avx512_vnni compiles it without the BF16 flags). Compiled
// natively and, with CPUKERN_SIMDE, against SIMDe (the simde rows, tests on any host).
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/ukernels/x86_w4a8.h"

namespace cpukern::moe {

const Ukernel CPUKERN_UKERNEL(moe_gemm_f32_qd8_mxfp4p16x4_8x16, avx512_vnni) =
    make_w4a8_ukernel<x86_w4a8::Tile<x86_w4a8::Zmm>>(
        CPUKERN_UKERNEL_NAME(moe_gemm_f32_qd8_mxfp4p16x4_8x16, avx512_vnni), "mxfp4a8p16x4");

}  // namespace cpukern::moe
