#include "kernels/ternary/act_bitnet.h"

#include <algorithm>
#include <cmath>

namespace cpukern::ternary::act_bitnet {

namespace {
// Lanes of the fixed-length inner loops: the compiler vectorises them at -O2 (a libm
// nearbyint call per element cost about 3 ns, ~8 us for a K = 2560 row on Zen 4).
constexpr int kLanes = 16;

int32_t clamp_q(int32_t t) { return t < -128 ? -128 : t > 127 ? 127 : t; }
}  // namespace

int32_t quantize_row(const float* x, int64_t k, int8_t* q, float* dq) {
  float part[kLanes] = {};  // max is exact and order-free: lanes, then across them
  int64_t j = 0;
  for (; j + kLanes <= k; j += kLanes)
    for (int l = 0; l < kLanes; ++l) part[l] = std::max(part[l], std::fabs(x[j + l]));
  float amax = 0.0f;
  for (int l = 0; l < kLanes; ++l) amax = std::max(amax, part[l]);
  for (; j < k; ++j) amax = std::max(amax, std::fabs(x[j]));
  // The floor also keeps s finite for an all-zero row (BitNet's clamp(min=1e-5)).
  const float s = 127.0f / std::max(amax, 1e-5f);
  *dq = 1.0f / s;
  // |x[j] * s| <= 127 (rounded up at most an ulp): round_half_even_small applies.
  int32_t sum = 0;
  for (j = 0; j + kLanes <= k; j += kLanes) {
    int32_t c[kLanes];
    for (int l = 0; l < kLanes; ++l) c[l] = clamp_q(int32_t(round_half_even_small(x[j + l] * s)));
    for (int l = 0; l < kLanes; ++l) {
      q[j + l] = int8_t(c[l]);
      sum += c[l];
    }
  }
  for (; j < k; ++j) {
    const int32_t c = clamp_q(int32_t(round_half_even_small(x[j] * s)));
    q[j] = int8_t(c);
    sum += c;
  }
  return sum;
}

}  // namespace cpukern::ternary::act_bitnet
