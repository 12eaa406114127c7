// AVX-512 VNNI int8 (W8A8) micro-kernel (vpdpbusd on zmm, vnni_int8.h): the int8 column of the
// avx512_bf16 row (every AVX512_BF16 CPU has AVX512_VNNI). Compiled natively and, with
// CPUKERN_SIMDE, against SIMDe (the simde row, tests on any host).
#include "kernels/moe/ukernels/vnni_int8.h"
#include "kernels/moe/ukernels/ukernels.h"

#if defined(CPUKERN_SIMDE)
#define CPUKERN_UK moe_gemm_f32_qd8_qc8wp16x4_8x16__simde_avx512_vnni
#else
#define CPUKERN_UK moe_gemm_f32_qd8_qc8wp16x4_8x16__avx512_vnni
#endif
#define CPUKERN_STR2(x) #x
#define CPUKERN_STR(x) CPUKERN_STR2(x)

namespace cpukern::moe {

const Ukernel CPUKERN_UK =
    make_ukernel<vnni::Int8Tile<vnni::Zmm>>(CPUKERN_STR(CPUKERN_UK), "qc8wp16x4");

}  // namespace cpukern::moe
