// The decode-attention chunk (ukernel.h), written once with GCC/Clang vector extensions of W
// floats: each ISA's file instantiates decode_chunk<W, KV> (KV float or bf16 bits).
//
// Scores: each key row is loaded once for up to 4 query heads (one accumulator vector each,
// summed across lanes at the end). Softmax: the chunk's max, exp and sum per head over the
// scores row, padded with -inf to whole vectors (a masked key's weight is exactly 0). Values:
// 4 heads x 2 vectors of the output in registers while the value rows stream by.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/attention/ukernel.h"
#include "kernels/common/bf16.h"
#include "kernels/common/vec_math.h"

namespace cpukern::attention {
namespace {

template <int W>
using F = typename vec::Vec<W>::f;

// The low and high halves of a vector (register shuffles: a memcpy would put it in memory).
template <int W, size_t... I>
inline F<W / 2> low_half(F<W> v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, I...);
}
template <int W, size_t... I>
inline F<W / 2> high_half(F<W> v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, (I + W / 2)...);
}

// The lanes of v combined by op (a + b, or the larger), halving the vector each step.
template <int W, class Op>
inline float reduce(F<W> v, Op op) {
  if constexpr (W == 1) {
    return v[0];
  } else {
    constexpr auto half = std::make_index_sequence<W / 2>();
    return reduce<W / 2>(op(low_half<W>(v, half), high_half<W>(v, half)), op);
  }
}

template <int W>
inline float hsum(F<W> v) {
  return reduce<W>(v, [](auto a, auto b) { return a + b; });
}

template <int W>
inline float hmax(F<W> v) {
  return reduce<W>(v, [](auto a, auto b) { return a > b ? a : b; });
}

// fold(x, y): lanes [0, W/2) the sums of x's halves, lanes [W/2, W) those of y's.
template <int W, size_t... I>
inline F<W> fold(F<W> x, F<W> y, std::index_sequence<I...>) {
  constexpr size_t h = W / 2;
  return __builtin_shufflevector(x, y, (I < h ? I : I - h + W)...) +
         __builtin_shufflevector(x, y, (I < h ? I + h : I + W)...);
}

// fold of two folded vectors (x = [a0 | a1], y = [a2 | a3] by halves): quarter q of the
// result is the sum of the two quarters of half q % 2 of x (q < 2) or y.
template <int W, size_t... I>
inline F<W> fold_halves(F<W> x, F<W> y, std::index_sequence<I...>) {
  constexpr size_t qw = W / 4;
  return __builtin_shufflevector(x, y, ((I / qw) / 2 * W + (I / qw) % 2 * (W / 2) + I % qw)...) +
         __builtin_shufflevector(x, y,
                                 ((I / qw) / 2 * W + (I / qw) % 2 * (W / 2) + qw + I % qw)...);
}

// x + x's lanes i ^ S: in each group of 2S lanes, the sums of its halves.
template <int W, size_t S, size_t... I>
inline F<W> add_swapped(F<W> x, std::index_sequence<I...>) {
  return x + __builtin_shufflevector(x, x, (I ^ S)...);
}

// The lane sums of four vectors at once: two levels of folds leave each one's partial sums in
// W/4 lanes, which the swaps add up (for W = 16: 10 shuffles and adds, not 4 x 8).
template <int W>
inline void hsum4(F<W> a0, F<W> a1, F<W> a2, F<W> a3, float* s) {
  if constexpr (W < 4) {
    s[0] = hsum<W>(a0), s[1] = hsum<W>(a1), s[2] = hsum<W>(a2), s[3] = hsum<W>(a3);
  } else {
    constexpr auto lanes = std::make_index_sequence<W>();
    F<W> x = fold_halves<W>(fold<W>(a0, a1, lanes), fold<W>(a2, a3, lanes), lanes);
    if constexpr (W >= 8) x = add_swapped<W, 1>(x, lanes);
    if constexpr (W >= 16) x = add_swapped<W, 2>(x, lanes);
    for (int t = 0; t < 4; ++t) s[t] = x[t * (W / 4)];
  }
}

// W elements of a float32 or bf16 row as floats.
template <int W, class KV>
inline F<W> load_row(const KV* p) {
  if constexpr (sizeof(KV) == 4) {
    return vec::load<F<W>>(p);
  } else {
    return vec::widen<W>(vec::load<typename vec::Vec<W>::h>(p));
  }
}

template <class KV>
inline float to_float(KV x) {
  if constexpr (sizeof(KV) == 4) {
    return x;
  } else {
    return bf16_to_f32(x);
  }
}

// Accumulators are named variables, not arrays: GCC 12 keeps arrays of vectors in memory
// across a loop of unknown trip count. A group of fewer than 4 heads repeats its first head
// in the unused slots and drops their results.

// The row of head t0 + t of a group of `ng` (t < ng), else the group's first.
inline const float* group_row(const float* first, int64_t stride, int t, int ng) {
  return t < ng ? first + t * stride : first;
}

// scores[t][j] = scale * dot(q_t, k_j) + bias_t[j] for the heads t0 .. t0 + ng - 1.
template <int W, class KV>
inline void score_group(const Chunk& c, int t0, int ng) {
  const int64_t d = c.d, dv = d / W * W;
  const float* q = c.q + t0 * d;
  const float *q0 = q, *q1 = group_row(q, d, 1, ng), *q2 = group_row(q, d, 2, ng),
              *q3 = group_row(q, d, 3, ng);
  const KV* k = static_cast<const KV*>(c.k);
  for (int64_t j = 0; j < c.n; ++j, k += c.k_stride) {
    F<W> a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int64_t e = 0; e < dv; e += W) {
      const F<W> kv = load_row<W>(k + e);
      a0 += vec::load<F<W>>(q0 + e) * kv;
      a1 += vec::load<F<W>>(q1 + e) * kv;
      a2 += vec::load<F<W>>(q2 + e) * kv;
      a3 += vec::load<F<W>>(q3 + e) * kv;
    }
    float s[4];
    hsum4<W>(a0, a1, a2, a3, s);
    for (int t = 0; t < ng; ++t) {
      for (int64_t e = dv; e < d; ++e) s[t] += q[t * d + e] * to_float(k[e]);
      float x = s[t] * c.scale;
      if (c.bias) x += c.bias[(t0 + t) * c.bias_stride + j];
      c.scores[(t0 + t) * c.n_pad + j] = x;
    }
  }
}

// acc_t[e .. e + 2W) = sum_j p_t[j] v_j[e .. e + 2W) for the heads t0 .. t0 + ng - 1.
template <int W, class KV>
inline void accumulate_2w(const Chunk& c, int t0, int ng, int64_t e) {
  const float* p = c.scores + t0 * c.n_pad;
  const float *p0 = p, *p1 = group_row(p, c.n_pad, 1, ng), *p2 = group_row(p, c.n_pad, 2, ng),
              *p3 = group_row(p, c.n_pad, 3, ng);
  F<W> r00 = {}, r01 = {}, r10 = {}, r11 = {}, r20 = {}, r21 = {}, r30 = {}, r31 = {};
  const KV* v = static_cast<const KV*>(c.v) + e;
  for (int64_t j = 0; j < c.n; ++j, v += c.v_stride) {
    const F<W> v0 = load_row<W>(v), v1 = load_row<W>(v + W);
    const F<W> w0 = vec::splat<F<W>>(p0[j]), w1 = vec::splat<F<W>>(p1[j]);
    const F<W> w2 = vec::splat<F<W>>(p2[j]), w3 = vec::splat<F<W>>(p3[j]);
    r00 += w0 * v0, r01 += w0 * v1, r10 += w1 * v0, r11 += w1 * v1;
    r20 += w2 * v0, r21 += w2 * v1, r30 += w3 * v0, r31 += w3 * v1;
  }
  const F<W> r[4][2] = {{r00, r01}, {r10, r11}, {r20, r21}, {r30, r31}};
  for (int t = 0; t < ng; ++t) std::memcpy(c.acc + (t0 + t) * c.d + e, r[t], sizeof r[t]);
}

// The same for one vector of W outputs.
template <int W, class KV>
inline void accumulate_1w(const Chunk& c, int t0, int ng, int64_t e) {
  const float* p = c.scores + t0 * c.n_pad;
  const float *p0 = p, *p1 = group_row(p, c.n_pad, 1, ng), *p2 = group_row(p, c.n_pad, 2, ng),
              *p3 = group_row(p, c.n_pad, 3, ng);
  F<W> r0 = {}, r1 = {}, r2 = {}, r3 = {};
  const KV* v = static_cast<const KV*>(c.v) + e;
  for (int64_t j = 0; j < c.n; ++j, v += c.v_stride) {
    const F<W> v0 = load_row<W>(v);
    r0 += vec::splat<F<W>>(p0[j]) * v0, r1 += vec::splat<F<W>>(p1[j]) * v0;
    r2 += vec::splat<F<W>>(p2[j]) * v0, r3 += vec::splat<F<W>>(p3[j]) * v0;
  }
  const F<W> r[4] = {r0, r1, r2, r3};
  for (int t = 0; t < ng; ++t) std::memcpy(c.acc + (t0 + t) * c.d + e, &r[t], sizeof r[t]);
}

template <int W, class KV>
inline void accumulate_group(const Chunk& c, int t0, int ng) {
  const int64_t d = c.d;
  int64_t e = 0;
  for (; e + 2 * W <= d; e += 2 * W) accumulate_2w<W, KV>(c, t0, ng, e);
  for (; e + W <= d; e += W) accumulate_1w<W, KV>(c, t0, ng, e);
  for (; e < d; ++e) {  // the last D % W elements
    const KV* v = static_cast<const KV*>(c.v) + e;
    for (int t = t0; t < t0 + ng; ++t) {
      const float* p = c.scores + t * c.n_pad;
      float s = 0.0f;
      for (int64_t j = 0; j < c.n; ++j) s += p[j] * to_float(v[j * c.v_stride]);
      c.acc[t * d + e] = s;
    }
  }
}

// Scores row t -> exp(s - m), in place; m[t] and l[t].
template <int W>
inline void softmax_row(const Chunk& c, int t) {
  using I = typename vec::Vec<W>::i;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float* s = c.scores + t * c.n_pad;
  for (int64_t j = c.n; j < c.n_pad; ++j) s[j] = kNegInf;
  F<W> mx = vec::splat<F<W>>(kNegInf);
  for (int64_t j = 0; j < c.n_pad; j += W) {
    const F<W> x = vec::load<F<W>>(s + j);
    mx = x > mx ? x : mx;
  }
  // NaN scores: the comparisons above skip them; exp below turns them into NaN weights.
  const float m = hmax<W>(mx);
  c.m[t] = m;
  if (m == kNegInf) {  // every key masked out
    std::memset(s, 0, sizeof(float) * c.n_pad);
    c.l[t] = 0.0f;
    return;
  }
  F<W> sum = {};
  const F<W> neg_inf = vec::splat<F<W>>(kNegInf), zero = {};
  for (int64_t j = 0; j < c.n_pad; j += W) {
    const F<W> x = vec::load<F<W>>(s + j);
    const F<W> p = x == neg_inf ? zero : vec::vexp<F<W>, I>(x - m);
    std::memcpy(s + j, &p, sizeof p);
    sum += p;
  }
  c.l[t] = hsum<W>(sum);
}

template <int W, class KV>
void decode_chunk(const Chunk& c) {
  static_assert(16 % W == 0, "scores rows are padded to 16 floats");
  for (int t = 0; t < c.g; t += 4) score_group<W, KV>(c, t, c.g - t < 4 ? c.g - t : 4);
  for (int t = 0; t < c.g; ++t) softmax_row<W>(c, t);
  for (int t = 0; t < c.g; t += 4) accumulate_group<W, KV>(c, t, c.g - t < 4 ? c.g - t : 4);
}

}  // namespace
}  // namespace cpukern::attention
