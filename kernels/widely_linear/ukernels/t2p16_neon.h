// The NEON (ARMv8.0 AdvSIMD) widely-linear micro-kernels over the public 2-bit layout
// (t2p16x4): no packer, no extra table, shared by the fused and the single sub-GEMV kernel
// so that both sum every dot product in the same order.
//
// Why this shape: NEON has 4 fp32 lanes, no gather and no per-lane float permute (only the
// byte table lookup tbl, whose indices would need 4 bytes per lane rebuilt from the 2-bit
// codes for every lookup), but 32 vector registers and cheap bitwise selects. So the lanes
// are 4 consecutive COLUMNS of one weight row (x is then a plain 16-byte load, never a
// broadcast), and a 2-bit code becomes a bitwise select of the activation:
//   wd   = the row's 32-bit word replicated to 4 lanes (ld1r / dup),
//   nz   = cmtst(wd, {3 << 2c}) (all ones where the code is nonzero),
//   sign = (wd << {31 - 2c}) & 0x80000000 (the "-1" bit moved to the float sign),
//   acc += (x & nz) ^ sign        (+x, -x or +0.0; and, eor, fadd: no multiply).
// Lane l of an accumulator sums the columns c = l (mod 4) in column order; one fixed
// reduction tree (faddp, faddp) ends each dot product. Weight 0 selects +0.0, so an Inf or
// NaN activation under a zero weight contributes nothing (as in the scalar reference).
//
// Fused kernel (1 row x 4 columns per step, all 8 sub-GEMVs):
//   O1 one decoded (nz, sign) pair per plane and 4 columns drives the plane's real-output
//      and imaginary-output sub-GEMVs (and every batch row of the pass);
//   O2 x_re, x_im, -x_im of 4 columns are loaded once for all 4 planes (8 sub-GEMVs);
//   O3 d1 = U_im.(-x_im) and d7 = W_re.(-x_im) read the precomputed -x_im: every update adds;
//   O4 the 8 accumulators per batch row stay in registers over the whole row; one
//      horizontal reduction each at the end. Scales: scale_epilogue(), afterwards.
// With several batch rows the planes of a row are visited in passes of NP planes so that
// 2 * NP * NB accumulators stay within kAccRegs; the order per accumulator never changes.
// The sub-GEMV kernel runs 4 rows at a time (independent accumulators, same order).
// Addressing is by pointer increments only: no multiply instruction, not even for offsets.
#pragma once
#include <arm_neon.h>

#include <cstdint>

#include "kernels/common/unroll.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {
namespace {


namespace t2p16_neon {

// Per group g of 4 columns of a word (lane l = column 4g + l): the nonzero mask bits and
// the left shifts that move the "-1" bit (bit 2c) to bit 31.
alignas(16) inline constexpr uint32_t kNz[16] = {
    3u << 0,  3u << 2,  3u << 4,  3u << 6,  3u << 8,  3u << 10, 3u << 12, 3u << 14,
    3u << 16, 3u << 18, 3u << 20, 3u << 22, 3u << 24, 3u << 26, 3u << 28, 3u << 30};
alignas(16) inline constexpr int32_t kSh[16] = {31, 29, 27, 25, 23, 21, 19, 17,
                                                15, 13, 11, 9,  7,  5,  3,  1};

// Accumulators of one fused pass: 8 (2 * NP * NB), so that with the 9 mask constants,
// the words and the activations of a group everything stays in the 32 registers.
inline constexpr int kAccRegs = 8;

struct Code {
  uint32x4_t nz, sign;
};

// The mask constants, loaded into registers once per call. The empty asm hides their
// values, so that the compiler keeps them in registers instead of rematerialising each
// one (adrp + ldr) at every use inside the loop.
struct Consts {
  uint32x4_t nz[4];
  int32x4_t sh[4];
  uint32x4_t signbit;
  CPUKERN_WL_INLINE Consts() {
    for (int g = 0; g < 4; ++g) {
      nz[g] = vld1q_u32(kNz + 4 * g);
      sh[g] = vld1q_s32(kSh + 4 * g);
    }
    signbit = vdupq_n_u32(0x80000000u);
    for (int g = 0; g < 4; ++g) asm("" : "+w"(nz[g]), "+w"(sh[g]));
    asm("" : "+w"(signbit));
  }
};

template <int g>
CPUKERN_WL_INLINE Code decode(uint32x4_t wd, const Consts& k) {
  return {vtstq_u32(wd, k.nz[g]), vandq_u32(vshlq_u32(wd, k.sh[g]), k.signbit)};
}

// acc += w * x lane-wise: (x & nz) ^ sign added.
CPUKERN_WL_INLINE float32x4_t step(float32x4_t acc, Code k, float32x4_t x) {
  const uint32x4_t v = veorq_u32(vandq_u32(vreinterpretq_u32_f32(x), k.nz), k.sign);
  return vaddq_f32(acc, vreinterpretq_f32_u32(v));
}

// Fixed reduction tree: (l0 + l1) + (l2 + l3).
CPUKERN_WL_INLINE float hsum(float32x4_t v) {
  const float32x4_t p = vpaddq_f32(v, v);
  return vgetq_lane_f32(vpaddq_f32(p, p), 0);
}

// Source (Src) each plane's real-output (A) and imaginary-output (B) sub-GEMV reads, as an
// index into the loaded {x_re, x_im, -x_im} of a group.
inline constexpr int kXA[4] = {0, 2, 0, 1};  // d0 x_re, d1 -x_im, d2 x_re, d3 x_im
inline constexpr int kXB[4] = {1, 0, 2, 0};  // d5 x_im, d4 x_re, d7 -x_im, d6 x_re
inline constexpr int kXK[kNumSub] = {0, 2, 0, 1, 0, 1, 0, 2};
inline constexpr int kLoaded[3] = {kXr, kXi, kNXi};

// One group g of 4 columns for planes [P0, P0 + NP) and NB batch rows.
template <int g, int P0, int NP, int NB>
CPUKERN_WL_INLINE void fused_group(const uint32x4_t (&wd)[NP], const float* const (&xs)[NB][3],
                                   const Consts& kc, float32x4_t (&a)[NB][2 * NP]) {
  float32x4_t x[NB][3];
  for (int b = 0; b < NB; ++b)
    for (int s = 0; s < 3; ++s) x[b][s] = vld1q_f32(xs[b][s] + 4 * g);
CPUKERN_UNROLL_BY(4)
  for (int p = 0; p < NP; ++p) {
    const Code k = decode<g>(wd[p], kc);
CPUKERN_UNROLL_BY(4)
    for (int b = 0; b < NB; ++b) {
      a[b][2 * p] = step(a[b][2 * p], k, x[b][kXA[P0 + p]]);
      a[b][2 * p + 1] = step(a[b][2 * p + 1], k, x[b][kXB[P0 + p]]);
    }
  }
  if constexpr (g < 3) fused_group<g + 1, P0, NP, NB>(wd, xs, kc, a);
}

// Planes [P0, P0 + NP) of one row for NB batch rows over all words.
template <int P0, int NP, int NB>
CPUKERN_WL_INLINE void fused_pass(const char* row, const Call& c, const Consts& kc,
                                  float* const (&dots)[NB]) {
  float32x4_t a[NB][2 * NP];
  for (auto& ab : a)
    for (auto& v : ab) v = vdupq_n_f32(0.0f);
  const uint32_t* pw[NP];
  const char* p = row;
  for (int q = 0; q < P0; ++q) p += c.loc.plane_stride;
  for (int q = 0; q < NP; ++q, p += c.loc.plane_stride) pw[q] = reinterpret_cast<const uint32_t*>(p);
  const float* xs[NB][3];
  for (int b = 0; b < NB; ++b)
    for (int s = 0; s < 3; ++s) xs[b][s] = c.x[b].src[kLoaded[s]];
  for (int64_t j = c.loc.inner; j > 0; --j) {
    uint32x4_t wd[NP];
    for (int q = 0; q < NP; ++q) wd[q] = vld1q_dup_u32(pw[q]++);
    fused_group<0, P0, NP, NB>(wd, xs, kc, a);
    for (int b = 0; b < NB; ++b)
      for (int s = 0; s < 3; ++s) xs[b][s] += 16;
  }
  for (int b = 0; b < NB; ++b)
    for (int q = 0; q < NP; ++q) {
      dots[b][kPlaneSubA[P0 + q]] = hsum(a[b][2 * q]);
      dots[b][kPlaneSubB[P0 + q]] = hsum(a[b][2 * q + 1]);
    }
}

template <int NB>
void fused_rows(const Call& c) {
  constexpr int kFit = kAccRegs / (2 * NB);
  constexpr int NP = kFit >= 4 ? 4 : kFit >= 2 ? 2 : 1;
  const Consts kc;
  const char* row = static_cast<const char*>(c.loc.w);
  float* dots[NB];
  for (int b = 0; b < NB; ++b) dots[b] = c.dots[b];
  for (int64_t i = c.rows; i > 0; --i, row += c.loc.tile_stride) {
    fused_pass<0, NP, NB>(row, c, kc, dots);
    if constexpr (NP <= 2) fused_pass<NP, NP, NB>(row, c, kc, dots);
    if constexpr (NP == 1) {
      fused_pass<2, 1, NB>(row, c, kc, dots);
      fused_pass<3, 1, NB>(row, c, kc, dots);
    }
    for (int b = 0; b < NB; ++b) dots[b] += kNumSub;
  }
}

inline void fused(const Call& c) {
  switch (c.nb) {
    case 1: return fused_rows<1>(c);
    case 2: return fused_rows<2>(c);
    case 3: return fused_rows<3>(c);
    default: return fused_rows<4>(c);
  }
}

// The single sub-GEMV c.k: NR rows x NB batch rows of independent accumulators.
template <int g, int NR, int NB>
CPUKERN_WL_INLINE void gemv_group(const uint32x4_t (&wd)[NR], const float* const (&xs)[NB],
                                  const Consts& kc, float32x4_t (&a)[NR][NB]) {
  float32x4_t x[NB];
  for (int b = 0; b < NB; ++b) x[b] = vld1q_f32(xs[b] + 4 * g);
CPUKERN_UNROLL_BY(4)
  for (int r = 0; r < NR; ++r) {
    const Code k = decode<g>(wd[r], kc);
CPUKERN_UNROLL_BY(4)
    for (int b = 0; b < NB; ++b) a[r][b] = step(a[r][b], k, x[b]);
  }
  if constexpr (g < 3) gemv_group<g + 1, NR, NB>(wd, xs, kc, a);
}

template <int NR, int NB>
CPUKERN_WL_INLINE void gemv_pass(const char* row, const Call& c, const Consts& kc,
                                 float* const (&dots)[NB]) {
  float32x4_t a[NR][NB];
  for (auto& ar : a)
    for (auto& v : ar) v = vdupq_n_f32(0.0f);
  const uint32_t* pw[NR];
  for (int r = 0; r < NR; ++r, row += c.loc.tile_stride) pw[r] = reinterpret_cast<const uint32_t*>(row);
  const float* xs[NB];
  for (int b = 0; b < NB; ++b) xs[b] = c.x[b].src[kLoaded[kXK[c.k]]];
  for (int64_t j = c.loc.inner; j > 0; --j) {
    uint32x4_t wd[NR];
    for (int r = 0; r < NR; ++r) wd[r] = vld1q_dup_u32(pw[r]++);
    gemv_group<0, NR, NB>(wd, xs, kc, a);
    for (int b = 0; b < NB; ++b) xs[b] += 16;
  }
  for (int b = 0; b < NB; ++b) {
    float* o = dots[b] + c.k;
    for (int r = 0; r < NR; ++r, o += kNumSub) *o = hsum(a[r][b]);
  }
}

template <int NR, int NB>
void gemv_rows(const Call& c) {
  const Consts kc;
  const char* row = static_cast<const char*>(c.loc.w);
  float* dots[NB];
  for (int b = 0; b < NB; ++b) dots[b] = c.dots[b];
  int64_t left = c.rows;
  for (; left >= NR; left -= NR) {
    gemv_pass<NR, NB>(row, c, kc, dots);
    for (int r = 0; r < NR; ++r) row += c.loc.tile_stride;
    for (int b = 0; b < NB; ++b) dots[b] += NR * kNumSub;
  }
  for (; left > 0; --left, row += c.loc.tile_stride) {
    gemv_pass<1, NB>(row, c, kc, dots);
    for (int b = 0; b < NB; ++b) dots[b] += kNumSub;
  }
}

inline void gemv(const Call& c) {
  switch (c.nb) {
    case 1: return gemv_rows<4, 1>(c);
    case 2: return gemv_rows<4, 2>(c);
    case 3: return gemv_rows<2, 3>(c);
    default: return gemv_rows<2, 4>(c);
  }
}

}  // namespace t2p16_neon
}  // namespace
}  // namespace cpukern::widely_linear
