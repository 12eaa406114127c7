// Activations of the fused MoE, written once with GCC/Clang vector extensions so the same
// source becomes AVX2, AVX-512 or NEON code in whichever ISA's translation unit includes it
// (each ukernel file instantiates activation_rows<W> with its vector width). tanh and erf on
// the portable exp of kernels/common/vec_math.h: no libm, branch-free, NaN-propagating.
//
// fp32 math on the fp32 GEMM output, plus the bf16 bias in fp32; the result is rounded to bf16
// (round to nearest even) because the second GEMM consumes bf16. Lane-wise: an output depends
// only on its own gate, up and bias, never on its lane, on the column tile or on the rows
// sharing the call (a ragged tail goes through the same vector code), so it is batch-invariant.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/common/bf16.h"
#include "kernels/common/vec_math.h"
#include "kernels/moe/moe.h"

namespace cpukern::moe::act {
// Internal linkage: each ISA's translation unit keeps its own copy (no ODR merge across flags).
namespace {

using vec::load;
using vec::splat;
using vec::Vec;
using vec::vexp;
using vec::widen;
using vec::narrow;

template <class F, class I>
inline F vsigmoid(F x) {
  return 1.0f / (1.0f + vexp<F, I>(-x));
}

// tanh(x) = sign(x) * (1 - 2 / (exp(2|x|) + 1)); absolute error ~1e-7.
template <class F, class I>
inline F vtanh(F x) {
  const F ax = x < 0.0f ? -x : x;
  const F e = vexp<F, I>(2.0f * ax);
  const F r = 1.0f - 2.0f / (e + 1.0f);
  return x < 0.0f ? -r : (x == x ? r : x);
}

// erf(x), Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7), odd symmetry.
template <class F, class I>
inline F verf(F x) {
  const F ax = x < 0.0f ? -x : x;
  const F t = 1.0f / (1.0f + 0.3275911f * ax);
  F p = splat<F>(1.061405429f);
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  p = p * t;
  const F r = 1.0f - p * vexp<F, I>(-ax * ax);
  return x < 0.0f ? -r : (x == x ? r : x);
}

template <class F, class I>
inline F apply(Activation a, F gate, F up) {
  switch (a) {
    case Activation::kSilu:
      return up * (gate * vsigmoid<F, I>(gate));
    case Activation::kGelu:
      return up * (0.5f * gate * (1.0f + verf<F, I>(gate * 0.70710678118654752f)));
    case Activation::kGeluTanh: {
      const F inner = 0.7978845608f * (gate + 0.044715f * gate * gate * gate);
      return up * (0.5f * gate * (1.0f + vtanh<F, I>(inner)));
    }
    case Activation::kSwigluOai:
    default: {
      gate = gate > 7.0f ? splat<F>(7.0f) : gate;
      up = up > 7.0f ? splat<F>(7.0f) : up;
      up = up < -7.0f ? splat<F>(-7.0f) : up;
      return (up + 1.0f) * (gate * vsigmoid<F, I>(1.702f * gate));
    }
  }
}

// The elements idx[q] of the concatenation (v0, v1): GCC's __builtin_shuffle (uzp1/uzp2 on
// NEON); clang, which only the fuzz build uses, lacks its variable-mask form: a lane loop.
template <int W, class F, class I>
inline F shuffle2(F v0, F v1, I idx) {
#if defined(__clang__)
  F r;
  for (int q = 0; q < W; ++q) r[q] = idx[q] < W ? v0[idx[q]] : v1[idx[q] - W];
  return r;
#else
  return __builtin_shuffle(v0, v1, idx);
#endif
}

template <int W, bool kInterleaved>
inline void activation_row(Activation a, int64_t n, const float* g, const float* u,
                           const bf16_t* bias_g, const bf16_t* bias_u, bf16_t* out) {
  using V = Vec<W>;
  typedef typename V::f F;
  typedef typename V::i I;
  typedef typename V::h H;
  // One vector of W outputs at a time; the tail goes through zero-padded copies.
  for (int64_t j = 0; j < n; j += W) {
    const int64_t cnt = n - j < W ? n - j : W;
    F gate, up;
    if (kInterleaved) {
      float tmp[2 * W] = {};
      const float* src = g + 2 * j;
      if (cnt < W) {
        std::memcpy(tmp, src, sizeof(float) * 2 * cnt);
        src = tmp;
      }
      const F v0 = load<F>(src), v1 = load<F>(src + W);
      I even, odd;
      for (int q = 0; q < W; ++q) even[q] = 2 * q, odd[q] = 2 * q + 1;
      gate = shuffle2<W>(v0, v1, even);  // de-interleave
      up = shuffle2<W>(v0, v1, odd);
      if (bias_g) {
        uint16_t bt[2 * W] = {};
        std::memcpy(bt, bias_g + 2 * j, sizeof(uint16_t) * 2 * cnt);
        const F b0 = widen<W>(load<H>(bt)), b1 = widen<W>(load<H>(bt + W));
        gate += shuffle2<W>(b0, b1, even);
        up += shuffle2<W>(b0, b1, odd);
      }
    } else {
      if (cnt == W) {
        gate = load<F>(g + j);
        up = load<F>(u + j);
      } else {
        float tg[W] = {}, tu[W] = {};
        std::memcpy(tg, g + j, sizeof(float) * cnt);
        std::memcpy(tu, u + j, sizeof(float) * cnt);
        gate = load<F>(tg);
        up = load<F>(tu);
      }
      if (bias_g) {
        uint16_t bg[W] = {}, bu[W] = {};
        std::memcpy(bg, bias_g + j, sizeof(uint16_t) * cnt);
        std::memcpy(bu, bias_u + j, sizeof(uint16_t) * cnt);
        gate += widen<W>(load<H>(bg));
        up += widen<W>(load<H>(bu));
      }
    }
    const H r = narrow<W>(apply<F, I>(a, gate, up));
    std::memcpy(out + j, &r, sizeof(uint16_t) * cnt);
  }
}

template <int W>
void activation_rows(Activation a, int64_t m, int64_t n, const float* g, const float* u,
                     int64_t ldc, bool interleaved, const bf16_t* bias_g, const bf16_t* bias_u,
                     bf16_t* out, int64_t ldo) {
  for (int64_t r = 0; r < m; ++r) {
    if (interleaved)
      activation_row<W, true>(a, n, g + r * ldc, nullptr, bias_g, nullptr, out + r * ldo);
    else
      activation_row<W, false>(a, n, g + r * ldc, u + r * ldc, bias_g, bias_u, out + r * ldo);
  }
}

}  // namespace
}  // namespace cpukern::moe::act
