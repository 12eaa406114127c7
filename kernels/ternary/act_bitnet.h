// Hugging Face BitNet's per-token int8 activation rule (transformers' BitLinear.activation_quant
// and ActQuant), the rule of ternary::gemv's act="int8_bitnet" (Act::kInt8BitNet).
#pragma once

#include <cstdint>

namespace cpukern::ternary::act_bitnet {

// s = 127 / max(max_j |x[j]|, 1e-5); q[j] = clamp(round_half_even(x[j] * s), -128, 127);
// *dq = 1 / s (BitNet divides the integer sums by s). Returns sum_j q[j].
// Differs from act="int8" (q = round(x * (127 / max|x|)), dq = max|x| / 127) only where
// max|x| < 1e-5 (BitNet's floor keeps s <= 1.27e7: such rows get smaller codes) and in the
// last bit of dq.
int32_t quantize_row(const float* x, int64_t k, int8_t* q, float* dq);

}  // namespace cpukern::ternary::act_bitnet
