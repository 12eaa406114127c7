// AVX-512 (no AVX512_BF16) micro-kernel on bf16 weights: fp32 FMA, 8 rows x 32 columns, bf16
// weights widened in registers (the tile: avx512_fma_bf16.h, shared with the MXFP4 kernel).
// The bf16 column of the avx512 and avx512_vnni rows. Compiled natively and, with
// CPUKERN_SIMDE, against SIMDe (the simde rows, tests on any host).
#include "kernels/moe/ukernels/avx512_fma_bf16.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel CPUKERN_UKERNEL(moe_gemm_f32_f32_bf16p32x2_8x32, avx512) =
    make_ukernel<avx512fma::Tile<avx512fma::Bf16Src>>(
        CPUKERN_UKERNEL_NAME(moe_gemm_f32_f32_bf16p32x2_8x32, avx512), "bf16p32x2");

}  // namespace cpukern::moe
