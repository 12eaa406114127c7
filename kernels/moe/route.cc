// Router: a token's logits -> its top-k experts and their weights (RouteRule), and the whole
// bf16 router of a model (its logits GEMV on linear()'s kernel, then the rule) in one call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/errors.h"
#include "kernels/moe/moe.h"

namespace cpukern::moe {

RouteRule parse_route_rule(const std::string& name) {
  if (name == "softmax_topk") return RouteRule::kSoftmaxTopk;
  if (name == "topk_softmax") return RouteRule::kTopkSoftmax;
  throw_arg("rule", "expected 'softmax_topk' or 'topk_softmax', got '" + name + "'");
}

namespace {

void check_route(int64_t t, int64_t e, int64_t topk, bool renormalize, RouteRule rule) {
  check_arg(t >= 0, "router_logits", "number of tokens must be >= 0, got " + std::to_string(t));
  check_arg(e >= 1, "router_logits", "number of experts must be >= 1, got " + std::to_string(e));
  check_arg(e <= INT32_MAX, "router_logits", "too many experts for int32 ids");
  check_arg(topk >= 1 && topk <= e, "topk",
            "must be in [1, " + std::to_string(e) + "], got " + std::to_string(topk));
  check_arg(rule == RouteRule::kSoftmaxTopk || rule == RouteRule::kTopkSoftmax, "rule",
            "unknown routing rule");
  check_arg(!(renormalize && rule == RouteRule::kTopkSoftmax), "renormalize",
            "topk_softmax weights already sum to 1; pass renormalize=False");
}

// One token: the k experts of the largest `score` (ties to the lower id, NaN never beats a
// number) into ids[0..k), their scores into top[0..k).
void top_k(const float* score, int64_t e, int64_t topk, std::vector<char>& taken, float* top,
           int64_t* ids) {
  std::fill(taken.begin(), taken.end(), 0);
  for (int64_t k = 0; k < topk; ++k) {
    int64_t best = -1;
    for (int64_t j = 0; j < e; ++j) {
      if (taken[j]) continue;
      // Strictly greater keeps the lower id on ties.
      if (best < 0 || score[j] > score[best] || (std::isnan(score[best]) && !std::isnan(score[j])))
        best = j;
    }
    taken[best] = 1;
    top[k] = score[best];
    ids[k] = best;
  }
}

// Softmax of n values in place: exp(v - max) / sum, in float32 (torch's order of operations).
void softmax(float* v, int64_t n) {
  float mx = v[0];
  for (int64_t j = 1; j < n; ++j) mx = v[j] > mx ? v[j] : mx;
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    v[j] = std::exp(v[j] - mx);
    sum += v[j];
  }
  for (int64_t j = 0; j < n; ++j) v[j] /= sum;
}

// The routing of one token (validated by check_route): weights and ids (topk each).
struct RowRouter {
  RowRouter(int64_t e, int64_t topk)
      : e(e), topk(topk), p(size_t(e)), taken(size_t(e)), picked(size_t(topk)) {}

  template <typename Id>
  void run(const float* logits, RouteRule rule, bool renormalize, float* weights, Id* ids) {
    std::copy(logits, logits + e, p.begin());
    if (rule == RouteRule::kSoftmaxTopk) softmax(p.data(), e);
    top_k(p.data(), e, topk, taken, weights, picked.data());
    if (rule == RouteRule::kTopkSoftmax) softmax(weights, topk);
    if (renormalize) {
      float ksum = 0.0f;
      for (int64_t k = 0; k < topk; ++k) ksum += weights[k];
      for (int64_t k = 0; k < topk; ++k) weights[k] /= ksum;
    }
    for (int64_t k = 0; k < topk; ++k) ids[k] = Id(picked[k]);
  }

  const int64_t e, topk;
  std::vector<float> p;
  std::vector<char> taken;
  std::vector<int64_t> picked;
};

}  // namespace

void route(const float* logits, int64_t t, int64_t e, int64_t topk, bool renormalize,
           float* weights, int32_t* ids, RouteRule rule) {
  check_route(t, e, topk, renormalize, rule);
  if (t == 0) return;
  check_arg(logits != nullptr, "router_logits", "null pointer");
  check_arg(weights != nullptr, "topk_weights", "null pointer");
  check_arg(ids != nullptr, "topk_ids", "null pointer");
  checked_mul(t, e, "router_logits");
  RowRouter row(e, topk);
  for (int64_t r = 0; r < t; ++r)
    row.run(logits + r * e, rule, renormalize, weights + r * topk, ids + r * topk);
}

void router(const bf16_t* x, int64_t t, int64_t h, const PackedExperts& w, const bf16_t* bias,
            int64_t topk, RouteRule rule, bool renormalize, int threads, bf16_t* logits,
            bf16_t* weights, int64_t* ids) {
  check_route(t, w.o, topk, renormalize, rule);
  if (t > 0) {
    check_arg(weights != nullptr, "weights", "null pointer");
    check_arg(ids != nullptr, "ids", "null pointer");
    checked_mul(t, topk, "weights");
    checked_mul(t, w.o, "logits");
    checked_mul(t, h, "x");
    check_arg(logits != nullptr, "logits", "null pointer");
    const int64_t nl = t * w.o * 2, nw = t * topk * 2, ni = t * topk * 8;
    check_disjoint(logits, nl, "logits", {{x, t * h * 2, "x"}, {bias, w.o * 2, "bias"}});
    w.check_disjoint_from(logits, nl, "logits", "w");
    check_disjoint(weights, nw, "weights", {{x, t * h * 2, "x"}, {logits, nl, "logits"}});
    check_disjoint(ids, ni, "ids",
                   {{x, t * h * 2, "x"}, {logits, nl, "logits"}, {weights, nw, "weights"}});
    w.check_disjoint_from(weights, nw, "weights", "w");
    w.check_disjoint_from(ids, ni, "ids", "w");
  }
  linear(x, t, h, w, bias, threads, logits);  // checks x, w, bias and logits (its "out")
  RowRouter row(w.o, topk);
  std::vector<float> l(static_cast<size_t>(w.o)), tw(static_cast<size_t>(topk));
  for (int64_t r = 0; r < t; ++r) {
    const bf16_t* lr = logits + r * w.o;
    for (int64_t j = 0; j < w.o; ++j) l[j] = bf16_to_f32(lr[j]);
    row.run(l.data(), rule, renormalize, tw.data(), ids + r * topk);
    for (int64_t k = 0; k < topk; ++k) weights[r * topk + k] = f32_to_bf16(tw[k]);
  }
}

}  // namespace cpukern::moe
