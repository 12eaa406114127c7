// AVX-512 VNNI int8 (W8A8) micro-kernel (vpdpbusd on zmm, vnni_int8.h): the int8 column of the
// avx512_vnni row, and of the avx512_bf16 row (every AVX512_BF16 CPU has AVX512_VNNI; the
// library ukernels_avx512_vnni compiles it without the BF16 flags). Compiled natively and, with
// CPUKERN_SIMDE, against SIMDe (the simde rows, tests on any host).
#include "kernels/moe/ukernels/vnni_int8.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel CPUKERN_UKERNEL(moe_gemm_f32_qd8_qc8wp16x4_8x16, avx512_vnni) =
    make_ukernel<vnni::Int8Tile<vnni::Zmm>>(
        CPUKERN_UKERNEL_NAME(moe_gemm_f32_qd8_qc8wp16x4_8x16, avx512_vnni), "qc8wp16x4");

}  // namespace cpukern::moe
