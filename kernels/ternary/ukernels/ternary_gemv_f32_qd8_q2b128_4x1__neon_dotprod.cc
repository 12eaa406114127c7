// int8 ternary GEMV, q2b128 layout, 4-row tiles, NEON SDOT (ARMv8.2 dotprod; q2b_neon.h).
// Per 128 weights of a row: 2 loads, 8 decode ops (and/ushr, no shift back: the quarters
// keep their scale 4 / 16 and go to their own accumulators) and 8 sdot per batch row.
#include "kernels/ternary/ukernels/q2b_neon.h"

namespace cpukern::ternary {
namespace {

void run(const I8Args* a) { q2b_neon::sdot_batches(a, 0, 0); }

}  // namespace

const I8Ukernel ternary_gemv_f32_qd8_q2b128_4x1__neon_dotprod = {
    "ternary_gemv_f32_qd8_q2b128_4x1__neon_dotprod", "q2b128", 4, q2b_neon::packed_size,
    q2b_neon::row_bytes, run};

}  // namespace cpukern::ternary
