// Portable SIMD math written once with GCC/Clang vector extensions: the same source becomes
// AVX2, AVX-512 or NEON code in whichever ISA's translation unit includes it (W floats a
// vector). No libm, no Sleef: branch-free and NaN-propagating. Used by the fused MoE's
// activations and the decode attention's softmax.
#pragma once
#include <cstdint>
#include <cstring>

namespace cpukern::vec {
// Internal linkage: each ISA's translation unit keeps its own copy (no ODR merge across flags).
namespace {

template <int W>
struct Vec {
  typedef float f __attribute__((vector_size(4 * W)));
  typedef int32_t i __attribute__((vector_size(4 * W)));
  typedef uint32_t u __attribute__((vector_size(4 * W)));
  typedef uint16_t h __attribute__((vector_size(2 * W)));
};

template <class F>
inline F splat(float v) {
  F r = {};
  return r + v;
}

template <class T>
inline T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// exp(x), ~1-2 ulp on [-87.3, 88.3]; inputs outside are clamped (exp(-inf) ~ 1e-38, not 0).
template <class F, class I>
inline F vexp(F x) {
  x = x > 88.3f ? splat<F>(88.3f) : x;
  x = x < -87.3f ? splat<F>(-87.3f) : x;  // NaN compares false and stays NaN
  const F t = x * 1.44269504088896341f;
  const F fn = (t + 12582912.0f) - 12582912.0f;  // round to nearest (|t| < 2^22)
  F r = x - fn * 0.693145751953125f;               // ln2 hi
  r = r - fn * 1.42860682030941723212e-6f;          // ln2 lo
  F p = splat<F>(1.0f / 720.0f);
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const I n = __builtin_convertvector(fn, I);
  const I bits = (n + 127) << 23;
  return p * (F)bits;
}

// bf16 -> fp32 (exact) and fp32 -> bf16 round-nearest-even with quiet NaN, as bf16.h.
template <int W>
inline typename Vec<W>::f widen(typename Vec<W>::h v) {
  using U = typename Vec<W>::u;
  using F = typename Vec<W>::f;
  return (F)(__builtin_convertvector(v, U) << 16);
}
template <int W>
inline typename Vec<W>::h narrow(typename Vec<W>::f v) {
  using U = typename Vec<W>::u;
  using H = typename Vec<W>::h;
  const U bits = (U)v;
  const U nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const U rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const U quiet = (bits >> 16) | 0x40u;
  return __builtin_convertvector(nan ? quiet : rounded, H);
}

}  // namespace
}  // namespace cpukern::vec
