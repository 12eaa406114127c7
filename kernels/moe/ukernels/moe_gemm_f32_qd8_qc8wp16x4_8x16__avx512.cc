// AVX-512 BW int8 (W8A8) micro-kernel without VNNI (vpmovsxbw + vpmaddwd on zmm, avx512_int8.h)
// on the VNNI tile's qc8wp16x4 packing: the int8 column of the avx512 row. Compiled natively
// and, with CPUKERN_SIMDE, against SIMDe (the simde_avx512 row, tests on any host).
#include "kernels/moe/ukernels/avx512_int8.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel CPUKERN_UKERNEL(moe_gemm_f32_qd8_qc8wp16x4_8x16, avx512) =
    make_ukernel<avx512int8::Int8Tile>(
        CPUKERN_UKERNEL_NAME(moe_gemm_f32_qd8_qc8wp16x4_8x16, avx512), "qc8wp16x4");

}  // namespace cpukern::moe
