// The lookup micro-kernels (layouts g3r8x4 / g4r16x4, see lookup_layout.h), written once
// over a vector traits class V and included by one file per kernel:
//   V::vec, V::ivec        float and index vectors of V::R lanes (rows)
//   V::kR, kG, kK, kNegShift, kE (= 2^kG table entries)
//   V::kAccRegs            accumulators the register file holds with room to spare
//   V::zero(), load(p), shift<bits>(i), lookup(acc, pos, neg, table), store(p, v)
// Per group of G columns and per plane, the (+1, -1) pattern pair is decoded once (two
// shifts) and looked up in the tables of every sub-GEMV and every batch row that uses that
// plane: acc += T[pos] - T[neg].
//   O1: one decoded pair drives the plane's real-output and imaginary-output sub-GEMVs;
//   O2: the tables of x_re, x_im and -x_im (built once per call) are shared by all 8;
//   O3: d1 = U_im.(-x_im) and d7 = W_re.(-x_im) read the -x_im table: every update adds;
//   O4: the accumulators (R rows each) stay in registers over the whole row; no horizontal
//       reduction. Scales are applied afterwards by scale_epilogue().
// With several batch rows the planes of a tile are visited in passes of NP planes so that
// 2 * NP * NB accumulators fit in registers; every accumulator (one sub-GEMV of one batch
// row) is summed in the same order whatever NP and NB are, and the sub-GEMV kernel uses the
// same order, so fused, unfused and any batch grouping give identical bits.
// Addressing is by pointer increments only (Call::loc): no multiply instruction.
#pragma once
#include <cstdint>

#include "kernels/common/unroll.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear::lookup_impl {


// Table offsets (in units of kE floats: T_re 0, T_im 1, T_nim 2) of the two sub-GEMVs fed
// by plane p (kPlaneSubA[p], kPlaneSubB[p]), and of sub-GEMV k.
inline constexpr int kTabA[4] = {0, 2, 0, 1};  // d0 x_re, d1 -x_im, d2 x_re, d3 x_im
inline constexpr int kTabB[4] = {1, 0, 2, 0};  // d5 x_im, d4 x_re, d7 -x_im, d6 x_re
inline constexpr int kTabK[kNumSub] = {0, 2, 0, 1, 0, 1, 0, 2};

template <class V, int g, int P0, int NP, int NB>
CPUKERN_WL_INLINE void fused_group(const typename V::ivec* ch, const float* const (&tab)[NB],
                                   typename V::vec (&a)[NB][2 * NP]) {
  constexpr int kTab = 3 * V::kE;
CPUKERN_UNROLL_BY(4)
  for (int p = 0; p < NP; ++p) {
    const typename V::ivec w = V::load(ch + P0 + p);
    const typename V::ivec pos = V::template shift<V::kG * g>(w);
    const typename V::ivec neg = V::template shift<V::kNegShift + V::kG * g>(w);
CPUKERN_UNROLL_BY(4)
    for (int b = 0; b < NB; ++b) {
      const float* t = tab[b] + g * kTab;
      a[b][2 * p] = V::lookup(a[b][2 * p], pos, neg, t + kTabA[P0 + p] * V::kE);
      a[b][2 * p + 1] = V::lookup(a[b][2 * p + 1], pos, neg, t + kTabB[P0 + p] * V::kE);
    }
  }
}

template <class V, int g, int P0, int NP, int NB>
CPUKERN_WL_INLINE void fused_groups(const typename V::ivec* ch, const float* const (&tab)[NB],
                                    typename V::vec (&a)[NB][2 * NP]) {
  fused_group<V, g, P0, NP, NB>(ch, tab, a);
  if constexpr (g + 1 < V::kK) fused_groups<V, g + 1, P0, NP, NB>(ch, tab, a);
}

// Rows of a tile past `valid` are not written.
template <class V>
CPUKERN_WL_INLINE void put(typename V::vec v, float* dots, int k, int64_t valid) {
  alignas(64) float out[V::kR];
  V::store(out, v);
  for (int i = 0; i < V::kR && i < valid; ++i) dots[(i << 3) + k] = out[i];
}

// Planes [P0, P0 + NP) of one tile for NB batch rows over all chunks.
template <class V, int P0, int NP, int NB>
CPUKERN_WL_INLINE void fused_pass(const char* w, const Call& c, float* const (&dots)[NB],
                                  int64_t valid) {
  typename V::vec a[NB][2 * NP];
  for (auto& ab : a)
    for (auto& v : ab) v = V::zero();
  const float* tab[NB];
  for (int b = 0; b < NB; ++b) tab[b] = c.x[b].table;
  const typename V::ivec* ch = reinterpret_cast<const typename V::ivec*>(w);
  for (int64_t i = c.loc.inner; i > 0; --i, ch += 4) {
    fused_groups<V, 0, P0, NP, NB>(ch, tab, a);
    for (int b = 0; b < NB; ++b) tab[b] += V::kK * 3 * V::kE;
  }
  for (int b = 0; b < NB; ++b)
    for (int p = 0; p < NP; ++p) {
      put<V>(a[b][2 * p], dots[b], kPlaneSubA[P0 + p], valid);
      put<V>(a[b][2 * p + 1], dots[b], kPlaneSubB[P0 + p], valid);
    }
}

template <class V, int NB>
void fused_tiles(const Call& c) {
  // Planes per pass: 2 * NP * NB accumulators within V::kAccRegs.
  constexpr int kFit = V::kAccRegs / (2 * NB);
  constexpr int NP = kFit >= 4 ? 4 : kFit >= 2 ? 2 : 1;
  const char* w = static_cast<const char*>(c.loc.w);
  float* dots[NB];
  for (int b = 0; b < NB; ++b) dots[b] = c.dots[b];
  for (int64_t left = c.rows; left > 0; left -= V::kR, w += c.loc.tile_stride) {
    fused_pass<V, 0, NP, NB>(w, c, dots, left);
    if constexpr (NP <= 2) fused_pass<V, NP, NP, NB>(w, c, dots, left);
    if constexpr (NP == 1) {
      fused_pass<V, 2, 1, NB>(w, c, dots, left);
      fused_pass<V, 3, 1, NB>(w, c, dots, left);
    }
    for (int b = 0; b < NB; ++b) dots[b] += V::kR * kNumSub;
  }
}

template <class V>
void fused(const Call& c) {
  switch (c.nb) {
    case 1: return fused_tiles<V, 1>(c);
    case 2: return fused_tiles<V, 2>(c);
    case 3: return fused_tiles<V, 3>(c);
    default: return fused_tiles<V, 4>(c);
  }
}

// The single sub-GEMV c.k: NT tiles x NB batch rows of independent accumulators.
template <class V, int g, int NT, int NB>
CPUKERN_WL_INLINE void gemv_groups(const typename V::ivec (&wv)[NT], const float* const (&tab)[NB],
                                   typename V::vec (&a)[NT][NB]) {
CPUKERN_UNROLL_BY(4)
  for (int t = 0; t < NT; ++t) {
    const typename V::ivec pos = V::template shift<V::kG * g>(wv[t]);
    const typename V::ivec neg = V::template shift<V::kNegShift + V::kG * g>(wv[t]);
CPUKERN_UNROLL_BY(4)
    for (int b = 0; b < NB; ++b)
      a[t][b] = V::lookup(a[t][b], pos, neg, tab[b] + g * 3 * V::kE);
  }
  if constexpr (g + 1 < V::kK) gemv_groups<V, g + 1, NT, NB>(wv, tab, a);
}

template <class V, int NT, int NB>
CPUKERN_WL_INLINE void gemv_pass(const char* w, const Call& c, float* const (&dots)[NB],
                                 int64_t valid) {
  typename V::vec a[NT][NB];
  for (auto& at : a)
    for (auto& v : at) v = V::zero();
  const float* tab[NB];
  const int off = kTabK[c.k] * V::kE;
  for (int b = 0; b < NB; ++b) tab[b] = c.x[b].table + off;
  const typename V::ivec* ch[NT];
  ch[0] = reinterpret_cast<const typename V::ivec*>(w);
  if constexpr (NT > 1)
    ch[1] = reinterpret_cast<const typename V::ivec*>(w + c.loc.tile_stride);
  for (int64_t i = c.loc.inner; i > 0; --i) {
    typename V::ivec wv[NT];
    for (int t = 0; t < NT; ++t) {
      wv[t] = V::load(ch[t]);
      ch[t] += 4;
    }
    gemv_groups<V, 0, NT, NB>(wv, tab, a);
    for (int b = 0; b < NB; ++b) tab[b] += V::kK * 3 * V::kE;
  }
  for (int t = 0; t < NT; ++t)
    for (int b = 0; b < NB; ++b)
      put<V>(a[t][b], dots[b] + t * V::kR * kNumSub, c.k, valid - t * V::kR);
}

template <class V, int NT, int NB>
void gemv_tiles(const Call& c) {
  const char* w = static_cast<const char*>(c.loc.w);
  float* dots[NB];
  for (int b = 0; b < NB; ++b) dots[b] = c.dots[b];
  for (int64_t left = c.rows; left > 0; left -= NT * V::kR) {
    if (NT > 1 && left <= V::kR) {
      gemv_pass<V, 1, NB>(w, c, dots, left);
      break;
    }
    gemv_pass<V, NT, NB>(w, c, dots, left);
    for (int t = 0; t < NT; ++t) w += c.loc.tile_stride;
    for (int b = 0; b < NB; ++b) dots[b] += NT * V::kR * kNumSub;
  }
}

template <class V>
void gemv(const Call& c) {
  switch (c.nb) {
    case 1: return gemv_tiles<V, 2, 1>(c);
    case 2: return gemv_tiles<V, 1, 2>(c);
    case 3: return gemv_tiles<V, 1, 3>(c);
    default: return gemv_tiles<V, 1, 4>(c);
  }
}

}  // namespace cpukern::widely_linear::lookup_impl
