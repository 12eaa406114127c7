// AVX-VNNI int8 (W8A8) micro-kernel (vpdpbusd on ymm, vnni_int8.h): the int8 column of the
// avx_vnni row, for AVX2 CPUs with AVX-VNNI and no AVX-512 (Intel Alder Lake and later client
// cores, Sierra Forest). Compiled natively and, with CPUKERN_SIMDE, against SIMDe (the simde
// row, tests on any host).
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/ukernels/vnni_int8.h"

#if defined(CPUKERN_SIMDE)
#define CPUKERN_UK moe_gemm_f32_qd8_qc8wp16x4_4x16__simde_avx_vnni
#else
#define CPUKERN_UK moe_gemm_f32_qd8_qc8wp16x4_4x16__avx_vnni
#endif
#define CPUKERN_STR2(x) #x
#define CPUKERN_STR(x) CPUKERN_STR2(x)

namespace cpukern::moe {

const Ukernel CPUKERN_UK =
    make_ukernel<vnni::Int8Tile<vnni::Ymm>>(CPUKERN_STR(CPUKERN_UK), "qc8wp16x4");

}  // namespace cpukern::moe
