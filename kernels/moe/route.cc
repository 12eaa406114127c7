// Router: softmax over experts, top-k (ties to the lower expert id), optional renormalisation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/errors.h"
#include "kernels/moe/moe.h"

namespace cpukern::moe {

void route(const float* logits, int64_t t, int64_t e, int64_t topk, bool renormalize,
           float* weights, int32_t* ids) {
  check_arg(t >= 0, "router_logits", "number of tokens must be >= 0, got " + std::to_string(t));
  check_arg(e >= 1, "router_logits", "number of experts must be >= 1, got " + std::to_string(e));
  check_arg(e <= INT32_MAX, "router_logits", "too many experts for int32 ids");
  check_arg(topk >= 1 && topk <= e, "topk",
            "must be in [1, " + std::to_string(e) + "], got " + std::to_string(topk));
  if (t == 0) return;
  check_arg(logits != nullptr, "router_logits", "null pointer");
  check_arg(weights != nullptr, "topk_weights", "null pointer");
  check_arg(ids != nullptr, "topk_ids", "null pointer");
  checked_mul(t, e, "router_logits");

  std::vector<float> p(static_cast<size_t>(e));
  std::vector<char> taken(static_cast<size_t>(e));
  for (int64_t r = 0; r < t; ++r) {
    const float* l = logits + r * e;
    float mx = l[0];
    for (int64_t j = 1; j < e; ++j) mx = l[j] > mx ? l[j] : mx;
    float sum = 0.0f;
    for (int64_t j = 0; j < e; ++j) {
      p[j] = std::exp(l[j] - mx);
      sum += p[j];
    }
    for (int64_t j = 0; j < e; ++j) p[j] /= sum;
    std::fill(taken.begin(), taken.end(), 0);
    float ksum = 0.0f;
    for (int64_t k = 0; k < topk; ++k) {
      int64_t best = -1;
      for (int64_t j = 0; j < e; ++j) {
        if (taken[j]) continue;
        // Strictly greater keeps the lower id on ties; NaN never wins over a number.
        if (best < 0 || p[j] > p[best] || (std::isnan(p[best]) && !std::isnan(p[j]))) best = j;
      }
      taken[best] = 1;
      weights[r * topk + k] = p[best];
      ids[r * topk + k] = int32_t(best);
      ksum += p[best];
    }
    if (renormalize)
      for (int64_t k = 0; k < topk; ++k) weights[r * topk + k] /= ksum;
  }
}

}  // namespace cpukern::moe
