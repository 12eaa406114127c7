// Hugging Face BitNet's per-token int8 activation rule (transformers' BitLinear.activation_quant
// and ActQuant), the rule of ternary::gemv's act="int8_bitnet" (Act::kInt8BitNet).
#pragma once

#include <cmath>
#include <cstdint>

namespace cpukern::ternary::act_bitnet {

// std::nearbyint(t) (round half to even in the default rounding mode) for |t| <= 2**22,
// without a libm call (~3 ns per element). Where rint is one instruction (SSE4.1 roundss,
// AArch64 frintx) it is used; on baseline x86-64, adding 1.5 * 2**23 leaves no fraction bits
// and the FPU's rounding (to nearest, ties to even) rounds t; subtracting it back is exact.
// (That form is kept off targets with FMA: t = x * s + 1.5 * 2**23 could fuse and skip the
// rounding of the product.)
inline float round_half_even_small(float t) {
#if defined(__x86_64__) && !defined(__SSE4_1__) && !defined(__FMA__)
  constexpr float kMagic = 0x1.8p23f;
  return (t + kMagic) - kMagic;
#else
  return std::rint(t);
#endif
}

// s = 127 / max(max_j |x[j]|, 1e-5); q[j] = clamp(round_half_even(x[j] * s), -128, 127);
// *dq = 1 / s (BitNet divides the integer sums by s). Returns sum_j q[j].
// Differs from act="int8" (q = round(x * (127 / max|x|)), dq = max|x| / 127) only where
// max|x| < 1e-5 (BitNet's floor keeps s <= 1.27e7: such rows get smaller codes) and in the
// last bit of dq.
int32_t quantize_row(const float* x, int64_t k, int8_t* q, float* dq);

}  // namespace cpukern::ternary::act_bitnet
