// Activation rows whose fp32 partial sums could overflow are run through the kernels scaled by
// an exact power of two, and the epilogue scales the results back in double (ternary GEMV and
// the widely-linear layer, fp32 mode). Multiplying every input of an add/subtract chain by
// 2**-e multiplies every partial sum by 2**-e exactly (no rounding changes) unless a value
// becomes subnormal, so such a row gives the bits of the plain row wherever the plain row
// stayed finite and normal, and a finite result wherever the exact result is finite.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace cpukern::prescale {
namespace {  // internal linkage: compiled per ISA

// The bound kept on terms * max|x| * 2**-e: any partial sum of the row's terms (table
// entries included) is at most that, and 2**8 below FLT_MAX leaves room for rounding drift.
inline constexpr int kLog2Bound = 120;

// 0 for ordinary rows (terms * max|x| <= 2**120) and for rows holding inf or NaN (they
// propagate as IEEE arithmetic would); else the e > 0 with terms * max|x| * 2**-e < 2**120.
inline int exponent(const float* x, int64_t n, int64_t terms) {
  uint32_t amax = 0;  // max |x| as bits: an integer max that vectorises
  for (int64_t j = 0; j < n; ++j) {
    uint32_t b;
    std::memcpy(&b, x + j, 4);
    b &= 0x7fffffffu;
    amax = b > amax ? b : amax;
  }
  if (amax >= 0x7f800000u) return 0;
  float a;
  std::memcpy(&a, &amax, 4);
  const double bound = double(a) * double(terms);
  if (bound <= std::ldexp(1.0, kLog2Bound)) return 0;
  return std::ilogb(bound) + 1 - kLog2Bound;
}

// dst = x * 2**-e (exact but for results below FLT_MIN).
inline void scale_row(const float* x, int64_t n, int e, float* dst) {
  const float f = std::ldexp(1.0f, -e);
  for (int64_t j = 0; j < n; ++j) dst[j] = x[j] * f;
}

}  // namespace
}  // namespace cpukern::prescale
