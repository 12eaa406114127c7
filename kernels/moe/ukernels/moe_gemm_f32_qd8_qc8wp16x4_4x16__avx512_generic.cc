// int8 (W8A8) on the avx512_bf16 row until its VNNI tile exists: the portable tile
// (int8_generic.h) compiled with the AVX-512 library's flags.
#include "kernels/moe/ukernels/int8_generic.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_qd8_qc8wp16x4_4x16__avx512_generic =
    make_ukernel<Int8GenericTile>("moe_gemm_f32_qd8_qc8wp16x4_4x16__avx512_generic", "qc8wp16x4");

}  // namespace cpukern::moe
