// AVX-512 BF16 micro-kernel on bf16 weights: vdpbf16ps, 8 rows x 32 columns (the tile:
// avx512_bf16_bf16.h, shared with the MXFP4 kernel).
#include "kernels/moe/ukernels/avx512_bf16_bf16.h"
#include "kernels/moe/ukernels/ukernels.h"

// Compiled natively and, with CPUKERN_SIMDE, against SIMDe (the simde row).
#if defined(CPUKERN_SIMDE)
#define CPUKERN_UK moe_gemm_f32_bf16_bf16p32x2_8x32__simde_avx512_bf16
#else
#define CPUKERN_UK moe_gemm_f32_bf16_bf16p32x2_8x32__avx512_bf16
#endif
#define CPUKERN_STR2(x) #x
#define CPUKERN_STR(x) CPUKERN_STR2(x)

namespace cpukern::moe {

const Ukernel CPUKERN_UK =
    make_ukernel<avx512bf16::Tile<avx512bf16::Bf16Src>>(
        CPUKERN_STR(CPUKERN_UK), "bf16p32x2");

}  // namespace cpukern::moe
