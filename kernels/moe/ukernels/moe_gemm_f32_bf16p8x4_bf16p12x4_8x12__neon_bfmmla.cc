// BFMMLA micro-kernel with 12-column panels: 8 rows x 12 columns, 4 row pairs x 6 column pairs
// = 24 accumulators (blocks of at most 4 rows: 2 row pairs x two panels, 4x24, also 24).
// BFMMLA's latency of 5 cycles on 4 pipes (Neoverse V1) wants 20 independent accumulators; the
// 8x8 tile has 16. Registers: 24 accumulators + 4 A + 1-2 B operands of 32.
#include "kernels/moe/ukernels/neon_bfmmla_bf16.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

const Ukernel moe_gemm_f32_bf16p8x4_bf16p12x4_8x12__neon_bfmmla =
    make_ukernel<bfmmla::Tile<6>>("moe_gemm_f32_bf16p8x4_bf16p12x4_8x12__neon_bfmmla",
                                  "bf16p12x4");

}  // namespace cpukern::moe
