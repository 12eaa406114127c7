// AVX-512 BF16 micro-kernel on MXFP4 weights: the bf16 kernel's vdpbf16ps tile (avx512_bf16_bf16.h)
// with each k pair's 32 columns decoded in registers to the bf16 pair words it consumes.
#include "kernels/moe/ukernels/avx512_bf16_mxfp4.h"
#include "kernels/moe/ukernels/ukernels.h"

// Compiled natively and, with CPUKERN_SIMDE, against SIMDe (the simde row).
#if defined(CPUKERN_SIMDE)
#define CPUKERN_UK moe_gemm_f32_bf16_mxfp4p32_8x32__simde_avx512_bf16
#else
#define CPUKERN_UK moe_gemm_f32_bf16_mxfp4p32_8x32__avx512_bf16
#endif
#define CPUKERN_STR2(x) #x
#define CPUKERN_STR(x) CPUKERN_STR2(x)

namespace cpukern::moe {

const Ukernel CPUKERN_UK =
    make_ukernel<avx512bf16::Mxfp4Tile>(CPUKERN_STR(CPUKERN_UK),
                                        "mxfp4p32");

}  // namespace cpukern::moe
