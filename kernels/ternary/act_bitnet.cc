#include "kernels/ternary/act_bitnet.h"

#include <algorithm>
#include <cmath>

namespace cpukern::ternary::act_bitnet {

int32_t quantize_row(const float* x, int64_t k, int8_t* q, float* dq) {
  float amax = 0.0f;
  for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(x[j]));
  // The floor also keeps s finite for an all-zero row (BitNet's clamp(min=1e-5)).
  const float s = 127.0f / std::max(amax, 1e-5f);
  *dq = 1.0f / s;
  int32_t sum = 0;
  for (int64_t j = 0; j < k; ++j) {
    const float t = std::nearbyint(x[j] * s);  // torch.round: half to even
    q[j] = int8_t(std::min(127.0f, std::max(-128.0f, t)));
    sum += q[j];
  }
  return sum;
}

}  // namespace cpukern::ternary::act_bitnet
