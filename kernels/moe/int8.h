// int8 W8A8 experts: the quantisation formulas, written once (every variant's pack_a calls
// quantize_row, so the quantised activations are the same bytes on every ISA).
//
// Weights (per output channel, symmetric): s = amax_row / 127.0f (fp32 division); q =
// clamp(rint(w / s), -127, 127) (fp32 division, round half to even); s == 0 (amax 0, or amax
// below 127 * 2**-149 so that s underflows) -> q = 0. W = q * s.
// Activations (per token, symmetric, dynamic): amax = max |x_k| (fp32, exact); amax == 0 ->
// q = 0, sa = 0; else inv = 127.0f / amax, q_k = clamp(rint(x_k * inv), -127, 127), sa =
// amax / 127.0f (all fp32). A row with amax < 2**-64 is first scaled by 2**64 (exact, x_k and
// amax alike) so that inv stays finite; a row holding an inf or NaN gets q = 0 and sa = NaN
// (its outputs are NaN, as a float GEMM would make them inf or NaN).
// GEMM: C[r][c] = float(double(acc) * double(sa_r) * double(sw_c)) (then + C when
// accumulating), acc the exact int32 sum of q_a * q_w: K <= kMaxK keeps |acc| <= K * 127 * 127
// < 2**31. In double nothing overflows or underflows (|acc| sa sw is within 2**-298..2**287),
// double(acc) * sa is exact while |acc| < 2**29 and each double product is within 2**-53 of
// exact, so the one fp32 rounding dominates: |C - acc sa sw| <= 1.0000001 u |acc sa sw|
// (u = 2**-24; + 2**-150 for a subnormal C), and C is inf only where acc sa sw itself rounds
// past FLT_MAX. (The fp32 products (float(acc) * sa) * sw of the first version overflowed for
// |x| around 1e36 where the exact result was finite, and turned the rest of the row into NaN.)
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/bf16.h"

namespace cpukern::moe::int8 {
// Internal linkage: every ISA's translation unit keeps its own copy (an inline function with
// external linkage, vectorised with AVX-512 flags in one unit, could be the copy the linker
// keeps for all of them).
namespace {

inline constexpr int kQMax = 127;
// The largest K whose int32 sums cannot overflow: K * 127 * 127 <= 2**31 - 1.
inline constexpr int64_t kMaxK = (int64_t(1) << 31) / (127 * 127);

inline int8_t clamp_q(float v) {
  v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
  return int8_t(v);
}

// One activation row: x (k bf16) -> q (k int8); returns sa.
inline float quantize_row(const bf16_t* x, int64_t k, int8_t* q) {
  uint32_t amax_bits = 0;  // max of |x| as fp32 bits: integer max, any order, NaN above inf
  for (int64_t j = 0; j < k; ++j) {
    const uint32_t b = (uint32_t(x[j]) << 16) & 0x7fffffffu;
    amax_bits = b > amax_bits ? b : amax_bits;
  }
  if (amax_bits == 0 || amax_bits >= 0x7f800000u) {
    for (int64_t j = 0; j < k; ++j) q[j] = 0;
    return amax_bits == 0 ? 0.0f : std::nanf("");
  }
  float amax;
  std::memcpy(&amax, &amax_bits, 4);
  const float pre = amax < 0x1p-64f ? 0x1p64f : 1.0f;
  const float inv = 127.0f / (amax * pre);
  for (int64_t j = 0; j < k; ++j) q[j] = clamp_q(std::rint((bf16_to_f32(x[j]) * pre) * inv));
  return amax / 127.0f;
}

// Weights (rows, k) bf16 -> q (rows, k) int8, s (rows) fp32. Returns the index of the first
// non-finite weight (nothing meaningful is written then), or -1.
inline int64_t quantize_weights(const bf16_t* w, int64_t rows, int64_t k, int8_t* q, float* s) {
  for (int64_t r = 0; r < rows; ++r) {
    const bf16_t* src = w + r * k;
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float v = std::fabs(bf16_to_f32(src[j]));
      if (!(v <= 3.4028235e38f)) return r * k + j;
      amax = v > amax ? v : amax;
    }
    const float sc = amax / 127.0f;
    s[r] = sc;
    for (int64_t j = 0; j < k; ++j)
      q[r * k + j] = sc == 0.0f ? int8_t(0) : clamp_q(std::rint(bf16_to_f32(src[j]) / sc));
  }
  return -1;
}

// The first of n weights that is -128 (symmetric int8 weights lie in [-127, 127]), or -1.
inline int64_t first_minus_128(const int8_t* q, int64_t n) {
  if (n <= 0) return -1;
  const void* p = std::memchr(q, 0x80, size_t(n));
  return p ? static_cast<const int8_t*>(p) - q : -1;
}

// The first of n scales that is not finite and >= 0, or -1.
inline int64_t first_bad_scale(const float* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!(s[i] >= 0.0f && s[i] <= 3.4028235e38f)) return i;
  return -1;
}

// W = q * s (fp32), (rows, k).
inline void dequantize(const int8_t* q, const float* s, int64_t rows, int64_t k, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) out[r * k + j] = float(q[r * k + j]) * s[r];
}

}  // namespace
}  // namespace cpukern::moe::int8
