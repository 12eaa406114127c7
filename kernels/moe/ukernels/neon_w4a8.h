// Naming: ukernels/<isa>_<format>.h. What the three AArch64 W4A8 tiles (w4a8_loop.h) share:
// the e2m1 decode (one tbl per 16 weights), the block multipliers from the rel bytes, and the
// exact int32 -> fp32 step of each block's FMA.
#pragma once
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels/common/unroll.h"
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

// The 16-column tiles (SDOT, smull/smlal): per panel and 32-k block, 16 rel bytes and 256
// code bytes, 64 per quad of columns. One pass over the blocks keeps NQ quads (q0 ..) of M rows
// in fp32 registers: acc[r][4 q0 ..) = step 5. Sums::run<M>(k, a, lda, codes, s) gives one
// quad's int32 block sums of the M rows (A of the block at a, rows lda apart; the quad's 64
// code bytes), started at k.start().
template <class Sums, int M, int NQ>
inline void quad_pass(const int8_t* a, int64_t lda, int64_t nb, const uint8_t* rel,
                      const uint8_t* codes, int q0, float* acc, int64_t ldacc) {
  const Consts k;
  float32x4_t c[M][NQ];
  CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    CPUKERN_UNROLL for (int q = 0; q < NQ; ++q) c[r][q] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* cb = codes + b * 256 + 64 * q0;
    float32x4_t m[NQ];
    mults<NQ>(rel + b * 16 + 4 * q0, m);
    CPUKERN_UNROLL for (int q = 0; q < NQ; ++q) {
      int32x4_t s[M];
      Sums::template run<M>(k, a + b * 32, lda, cb + 64 * q, s);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) c[r][q] = fma_block(k, s[r], m[q], c[r][q]);
    }
  }
  CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    CPUKERN_UNROLL for (int q = 0; q < NQ; ++q) vst1q_f32(acc + r * ldacc + 4 * (q0 + q), c[r][q]);
}

// A 16-column tile's call: per panel, passes of NQ quads over the blocks (the decode is per
// weight and shared by the M rows, so a pass costs only A and rel re-reads from L1).
template <class Sums, int M, int NQ>
inline void quad_tile(const int8_t* a, int64_t lda, int64_t nb, const uint8_t* rel,
                      const uint8_t* codes, int64_t panel, int np, float* acc, int64_t ldacc) {
  for (int j = 0; j < np; ++j)
    CPUKERN_UNROLL for (int q0 = 0; q0 < 4; q0 += NQ)
      quad_pass<Sums, M, NQ>(a, lda, nb, rel + j * panel, codes + j * panel, q0, acc + j * 16,
                             ldacc);
}

}  // namespace
}  // namespace cpukern::moe::neonw4a8
