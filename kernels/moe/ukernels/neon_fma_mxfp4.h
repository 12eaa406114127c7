// Naming: ukernels/<isa>_<format>.h (neon_fma_bf16.h). The NEON FMA tile on MXFP4 weights:
// the bf16 tile of neon_fma_bf16.h over weights decoded in registers (tbl -> fp16 -> fp32,
// times 2**(s - 127)).
#pragma once
#include <arm_neon.h>

#include <cstdint>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernels/neon_fma_bf16.h"

namespace cpukern::moe::neonfma {
namespace {  // internal linkage: compiled per ISA

// MXFP4 weights ("mxfp4p16": per panel per block of 32 k the 16 columns' scales, then per k
// pair j the 16 columns' bytes j; the AVX2 kernel's "mxfp4p16x4" orders the bytes of two k
// pairs by column half instead, for its 128-bit lanes). Decoded per k pair: tbl maps the nibbles
// to the high bytes of their fp16 values, fcvtl widens to fp32, one multiply by 2**(s - 127)
// gives the exact weight (mxfp4.h).
struct Mxfp4Src {
  static constexpr int kPairsPerBlock = 16, kBlockBytes = 16 + 16 * 16;
  const uint8_t* w;
  const uint8_t* blk = nullptr;
  float32x4_t f[4];  // 2**(s - 127) of columns 4q..4q+3
  const uint8x16_t table = vld1q_u8(mxfp4::kF16Hi);
  explicit Mxfp4Src(const void* p) : w(static_cast<const uint8_t*>(p)) {}
  void block(int64_t b) {
    blk = w + b * kBlockBytes;
    const uint8x16_t s = vld1q_u8(blk);
    const uint16x8_t s0 = vmovl_u8(vget_low_u8(s)), s1 = vmovl_high_u8(s);
    const uint32x4_t sub = vdupq_n_u32(0x00400000u);
    const uint32x4_t e[4] = {vmovl_u16(vget_low_u16(s0)), vmovl_high_u16(s0),
                             vmovl_u16(vget_low_u16(s1)), vmovl_high_u16(s1)};
    CPUKERN_UNROLL for (int q = 0; q < 4; ++q)
      f[q] = vreinterpretq_f32_u32(vmaxq_u32(vshlq_n_u32(e[q], 23), sub));
  }
  void decode(uint8x16_t codes, float32x4_t* v) const {
    const uint8x16_t t = vqtbl1q_u8(table, codes), z = vdupq_n_u8(0);
    const float16x8_t h0 = vreinterpretq_f16_u8(vzip1q_u8(z, t));  // columns 0-7
    const float16x8_t h1 = vreinterpretq_f16_u8(vzip2q_u8(z, t));  // columns 8-15
    v[0] = vmulq_f32(vcvt_f32_f16(vget_low_f16(h0)), f[0]);
    v[1] = vmulq_f32(vcvt_high_f32_f16(h0), f[1]);
    v[2] = vmulq_f32(vcvt_f32_f16(vget_low_f16(h1)), f[2]);
    v[3] = vmulq_f32(vcvt_high_f32_f16(h1), f[3]);
  }
  void pair(int64_t kk, float32x4_t* lo, float32x4_t* hi) const {
    const uint8x16_t b = vld1q_u8(blk + 16 + (kk & 15) * 16);
    decode(vandq_u8(b, vdupq_n_u8(0x0f)), lo);
    decode(vshrq_n_u8(b, 4), hi);
  }
};

struct Mxfp4Tile : Mxfp4TileOver<Tile<Mxfp4Src>, Mxfp4Src::kBlockBytes> {
  // Prefill (gemm_loop.h decoded_gemm): nk blocks of one panel -> the bf16 kernel's pair words
  // (the exact fp32 weights' high halves: odd k's kept, even k's shifted in below).
  using Decoded = Tile<Bf16Src>;
  static void decode_block(const uint8_t* src, int64_t nk, bf16_t* dst) {
    decode_pairs<Mxfp4Src>(src, nk, dst, [](const Mxfp4Src& s, int kk, uint32_t* d) {
      float32x4_t lo[4], hi[4];
      s.pair(kk, lo, hi);
      CPUKERN_UNROLL for (int q = 0; q < 4; ++q)
        vst1q_u32(d + 4 * q,
                  vsriq_n_u32(vreinterpretq_u32_f32(hi[q]), vreinterpretq_u32_f32(lo[q]), 16));
    });
  }
  static void pack_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t i,
                         void* dst) {  // code byte j of a column: row j of the panel
    mxfp4::pack_panels<kNR>(blocks, scales, o, i, kStepW, dst,
                            [](int col, int j) { return j * kNR + col; });
  }
};

}  // namespace
}  // namespace cpukern::moe::neonfma
