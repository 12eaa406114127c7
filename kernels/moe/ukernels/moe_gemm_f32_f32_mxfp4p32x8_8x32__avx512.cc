// AVX-512 (no AVX512_BF16) micro-kernel on MXFP4 weights (mxfp4p32x8, the avx512_bf16 row's
// packing): the bf16 kernel's fp32 FMA tile, 8 rows x 32 columns, each 16 weights decoded in
// registers by one shift, one vpermps and one exact multiply by the block scale; several row
// blocks read weights decoded once per K block (avx512_fma_mxfp4.h). The MXFP4 column of the
// avx512 and avx512_vnni rows. Compiled natively and, with CPUKERN_SIMDE, against SIMDe.
#include "kernels/moe/ukernels/avx512_fma_mxfp4.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel CPUKERN_UKERNEL(moe_gemm_f32_f32_mxfp4p32x8_8x32, avx512) =
    make_ukernel<avx512fma::Mxfp4Tile>(
        CPUKERN_UKERNEL_NAME(moe_gemm_f32_f32_mxfp4p32x8_8x32, avx512), "mxfp4p32x8");

}  // namespace cpukern::moe
