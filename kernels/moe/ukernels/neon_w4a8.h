// Naming: ukernels/<isa>_<format>.h. What the three AArch64 W4A8 tiles (w4a8_loop.h) share:
// the e2m1 decode (one tbl per 16 weights), the block multipliers from the rel bytes, and the
// exact int32 -> fp32 step of each block's FMA.
#pragma once
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels/moe/mxfp4.h"

namespace cpukern::moe::neonw4a8 {
namespace {  // internal linkage: compiled per ISA

// Block sums start at the bits of 1.5 * 2**23 instead of 0: an integer add of s with
// |s| < 2**22 to these bits gives the fp32 1.5 * 2**23 + s exactly (the exponent field does
// not move), and one fsub of 1.5 * 2**23 leaves float(s), exactly (|isum| <= 48768). This
// replaces scvtf (2 cycles on one pipe on Neoverse N1/V1 in llvm-mca 19's models) by an fsub,
// and costs nothing: the accumulators are initialised anyway.
inline constexpr int32_t kMagicBits = 0x4B400000;
inline constexpr float kMagic = 12582912.0f;  // 1.5 * 2**23

struct Consts {
  const int8x16_t table = vld1q_s8(mxfp4::kTwice);  // code -> 2 * e2m1 value, in [-12, 12]
  const uint8x16_t low = vdupq_n_u8(0x0f);
  const float32x4_t magic = vdupq_n_f32(kMagic);
  int32x4_t start() const { return vreinterpretq_s32_f32(magic); }  // kMagicBits: one register
};
static_assert(kMagic == 0x1.8p23f, "kMagicBits are the bits of kMagic");

// 16 code bytes (32 weights) -> the int8 w2 of the low nibbles and of the high nibbles: one
// tbl per 16 weights.
inline void decode(const Consts& k, const uint8_t* p, int8x16_t& lo, int8x16_t& hi) {
  const uint8x16_t v = vld1q_u8(p);
  lo = vqtbl1q_s8(k.table, vandq_u8(v, k.low));
  hi = vqtbl1q_s8(k.table, vshrq_n_u8(v, 4));
}

// Block multipliers: the fp32 of bits rel << 23 (w4a8_mult), four columns per vector, from 8
// rel bytes: rel << 7 (u16, rel <= 127) then shll #16.
inline void mults8(const uint8_t* rel, float32x4_t& m03, float32x4_t& m47) {
  const uint16x8_t r = vshll_n_u8(vld1_u8(rel), 7);
  m03 = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(r), 16));
  m47 = vreinterpretq_f32_u32(vshll_high_n_u16(r, 16));
}

// The multipliers of NQ (1, 2 or 4) column quads from their 4 NQ rel bytes.
template <int NQ>
inline void mults(const uint8_t* rel, float32x4_t (&m)[NQ]) {
  if constexpr (NQ == 1) {
    uint32_t raw;
    std::memcpy(&raw, rel, 4);
    const uint16x8_t r = vshll_n_u8(vcreate_u8(raw), 7);
    m[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(r), 16));
  } else {
    mults8(rel, m[0], m[1]);
    if constexpr (NQ == 4) mults8(rel + 8, m[2], m[3]);
  }
}

// [m(2j) m(2j+1) m(2j) m(2j+1)] from the column pair's 2 rel bytes (the SMMLA accumulator order).
inline float32x4_t mults_pair(const uint8_t* rel2) {
  uint16_t raw;
  std::memcpy(&raw, rel2, 2);
  const uint16x8_t r = vshll_n_u8(vreinterpret_u8_u16(vdup_n_u16(raw)), 7);
  return vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(r), 16));
}

// One block's step 5 for four elements: acc = fma(float(isum), mult, acc), isum from s (which
// started at kMagicBits).
inline float32x4_t fma_block(const Consts& k, int32x4_t s, float32x4_t m, float32x4_t acc) {
  return vfmaq_f32(acc, vsubq_f32(vreinterpretq_f32_s32(s), k.magic), m);
}

}  // namespace
}  // namespace cpukern::moe::neonw4a8
