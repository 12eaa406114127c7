// AVX-512 BF16 micro-kernel on MXFP4 weights packed one 32-bit word per column and 8 k
// (mxfp4p32x8): the bf16 kernel's vdpbf16ps tile (avx512_bf16_bf16.h), each 32 weights decoded
// in registers by one shift and one vpermw to the bf16 pair words it consumes.
#include "kernels/moe/ukernels/avx512_bf16_mxfp4.h"
#include "kernels/moe/ukernels/ukernels.h"

// Compiled natively and, with CPUKERN_SIMDE, against SIMDe (the simde row).
#if defined(CPUKERN_SIMDE)
#define CPUKERN_UK moe_gemm_f32_bf16_mxfp4p32x8_8x32__simde_avx512_bf16
#else
#define CPUKERN_UK moe_gemm_f32_bf16_mxfp4p32x8_8x32__avx512_bf16
#endif
#define CPUKERN_STR2(x) #x
#define CPUKERN_STR(x) CPUKERN_STR2(x)

namespace cpukern::moe {

const Ukernel CPUKERN_UK =
    make_ukernel<avx512bf16::Mxfp4x8Tile>(CPUKERN_STR(CPUKERN_UK), "mxfp4p32x8");

}  // namespace cpukern::moe
