// AVX2 int8 (W8A8) micro-kernel: vpmovsxbw + vpmaddwd on int16-widened operands, exact int32
// sums (avx2_int8.h), the fp32 epilogue of gemm_loop.h.
#include "kernels/moe/ukernels/avx2_int8.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_qd8_qc8wp16x2_4x16__avx2 =
    make_ukernel<avx2::Int8Tile>("moe_gemm_f32_qd8_qc8wp16x2_4x16__avx2", "qc8wp16x2");

}  // namespace cpukern::moe
