// int8 (W8A8) on the plain neon row (ARMv8.0, no SDOT: Cortex-A72 class): the portable tile
// (int8_generic.h) compiled with the NEON library's flags.
#include "kernels/moe/ukernels/int8_generic.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_qd8_qc8wp16x4_4x16__neon_generic =
    make_ukernel<Int8GenericTile>("moe_gemm_f32_qd8_qc8wp16x4_4x16__neon_generic", "qc8wp16x4");

}  // namespace cpukern::moe
