// The decode-attention chunk (ukernel.h), written once with GCC/Clang vector extensions of W
// floats: each ISA's file instantiates decode_chunk<W, KV> (KV float or bf16 bits).
//
// Scores: each key row is loaded once for up to 4 query heads (one accumulator vector each,
// summed across lanes at the end). Softmax: the chunk's max, exp and sum per head over the
// scores row, padded with -inf to whole vectors (a masked key's weight is exactly 0). Values:
// up to 4 heads x 4 vectors of the output in registers while the value rows stream by.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/attention/ukernel.h"
#include "kernels/common/vec_math.h"

namespace cpukern::attention {
namespace {

template <int W>
using F = typename vec::Vec<W>::f;

template <int W>
inline float hsum(F<W> v) {
  if constexpr (W == 1) {
    return v[0];
  } else {
    F<W / 2> lo, hi;
    std::memcpy(&lo, &v, sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return hsum<W / 2>(lo + hi);
  }
}

template <int W>
inline float hmax(F<W> v) {
  if constexpr (W == 1) {
    return v[0];
  } else {
    F<W / 2> lo, hi;
    std::memcpy(&lo, &v, sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return hmax<W / 2>(lo > hi ? lo : hi);
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
    const uint32_t bits = uint32_t(x) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
}

// scores[t][j] = scale * dot(q_t, k_j) + bias_t[j] for heads t0 .. t0 + NG - 1.
template <int W, class KV, int NG>
inline void score_heads(const Chunk& c, int t0) {
  const int64_t d = c.d, dv = d / W * W;
  const float* q = c.q + t0 * d;
  const KV* k = static_cast<const KV*>(c.k);
  for (int64_t j = 0; j < c.n; ++j, k += c.k_stride) {
    F<W> acc[NG] = {};
    for (int64_t e = 0; e < dv; e += W) {
      const F<W> kv = load_row<W>(k + e);
#pragma GCC unroll 4
      for (int t = 0; t < NG; ++t) acc[t] += vec::load<F<W>>(q + t * d + e) * kv;
    }
#pragma GCC unroll 4
    for (int t = 0; t < NG; ++t) {
      float s = hsum<W>(acc[t]);
      for (int64_t e = dv; e < d; ++e) s += q[t * d + e] * to_float(k[e]);
      s *= c.scale;
      if (c.bias) s += c.bias[(t0 + t) * c.bias_stride + j];
      c.scores[(t0 + t) * c.n_pad + j] = s;
    }
  }
}

// acc_t[e0 .. e0 + NE * W) = sum_j p_t[j] v_j[...] for heads t0 .. t0 + NG - 1.
template <int W, class KV, int NG, int NE>
inline void accumulate_heads(const Chunk& c, int t0, int64_t e0) {
  F<W> acc[NG][NE] = {};
  const KV* v = static_cast<const KV*>(c.v) + e0;
  const float* p = c.scores + t0 * c.n_pad;
  for (int64_t j = 0; j < c.n; ++j, v += c.v_stride) {
    F<W> row[NE];
#pragma GCC unroll 4
    for (int u = 0; u < NE; ++u) row[u] = load_row<W>(v + u * W);
#pragma GCC unroll 4
    for (int t = 0; t < NG; ++t) {
      const F<W> w = vec::splat<F<W>>(p[t * c.n_pad + j]);
#pragma GCC unroll 4
      for (int u = 0; u < NE; ++u) acc[t][u] += w * row[u];
    }
  }
  for (int t = 0; t < NG; ++t)
    for (int u = 0; u < NE; ++u)
      std::memcpy(c.acc + (t0 + t) * c.d + e0 + u * W, &acc[t][u], sizeof(F<W>));
}

template <int W, class KV, int NG>
inline void accumulate_group(const Chunk& c, int t0) {
  const int64_t d = c.d;
  int64_t e = 0;
  for (; e + 4 * W <= d; e += 4 * W) accumulate_heads<W, KV, NG, 4>(c, t0, e);
  for (; e + W <= d; e += W) accumulate_heads<W, KV, NG, 1>(c, t0, e);
  for (; e < d; ++e) {  // the last D % W elements
    const KV* v = static_cast<const KV*>(c.v) + e;
    for (int t = t0; t < t0 + NG; ++t) {
      const float* p = c.scores + t * c.n_pad;
      float s = 0.0f;
      for (int64_t j = 0; j < c.n; ++j) s += p[j] * to_float(v[j * c.v_stride]);
      c.acc[t * d + e] = s;
    }
  }
}

// Runs f<NG>(c, t0) over the heads in groups of 4, then the 1-3 left.
template <template <int> class Fn>
inline void by_head_groups(const Chunk& c) {
  int t = 0;
  for (; t + 4 <= c.g; t += 4) Fn<4>::run(c, t);
  switch (c.g - t) {
    case 3: Fn<3>::run(c, t); break;
    case 2: Fn<2>::run(c, t); break;
    case 1: Fn<1>::run(c, t); break;
    default: break;
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
struct Kernel {
  template <int NG>
  struct Score {
    static void run(const Chunk& c, int t0) { score_heads<W, KV, NG>(c, t0); }
  };
  template <int NG>
  struct Accumulate {
    static void run(const Chunk& c, int t0) { accumulate_group<W, KV, NG>(c, t0); }
  };
};

template <int W, class KV>
void decode_chunk(const Chunk& c) {
  static_assert(16 % W == 0, "scores rows are padded to 16 floats");
  by_head_groups<Kernel<W, KV>::template Score>(c);
  for (int t = 0; t < c.g; ++t) softmax_row<W>(c, t);
  by_head_groups<Kernel<W, KV>::template Accumulate>(c);
}

}  // namespace
}  // namespace cpukern::attention
