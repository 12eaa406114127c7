// Naming: ukernels/<isa>_<format>.h (neon_bfmmla_bf16.h). The BFMMLA tiles on MXFP4 weights:
// the bf16 tiles of neon_bfmmla_bf16.h over B operands decoded from MXFP4 in registers, plus
// the decode GEMV's fast path.
#pragma once
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernels/neon_bfmmla_bf16.h"

namespace cpukern::moe::bfmmla {
namespace {  // internal linkage: compiled per ISA

template <int PJ>
struct Mxfp4Gemv;  // the decode GEMV's fast path (below)

// B operands decoded from MXFP4 ("mxfp4p<2PJ>x4": per panel per block of 32 k, the 2PJ
// columns' scales, then per k step (4 k) per column pair 4 bytes: column c's k0k1, k2k3 bytes,
// column c+1's, as stored on disk; 17 bytes per 32 weights). Per operand: tbl maps the
// nibbles to the high bytes of their fp16 values, fcvtl widens to fp32, one multiply by
// 2**(s - 127) gives the exact weight, and its high half is the weight's bf16 (exact).
template <int PJ>
struct Mxfp4Src {
  static constexpr int kStepsPerBlock = 8, kNR = 2 * PJ, kBlockBytes = kNR * 17;
  using FastGemv = Mxfp4Gemv<PJ>;
  const uint8_t* w;
  int64_t panel;  // bytes from one panel to the next
  const uint8_t* blk = nullptr;  // the current block of the first panel
  float f[2][kNR];               // 2**(s - 127) per column of two panels
  const uint8x16_t table = vld1q_u8(mxfp4::kF16Hi);
  Mxfp4Src(const void* p, int64_t pn) : w(static_cast<const uint8_t*>(p)), panel(pn) {}
  template <int NP>
  void block(int64_t bi) {
    blk = w + bi * kBlockBytes;
    CPUKERN_UNROLL for (int pn = 0; pn < NP; ++pn)
      CPUKERN_UNROLL for (int q = 0; q < kNR; ++q) f[pn][q] = mxfp4::scale_f32(blk[pn * panel + q]);
  }
  bfloat16x8_t b(int64_t k, int j) const {
    const int pn = j / PJ, jp = j % PJ;
    uint32_t raw;
    std::memcpy(&raw, blk + pn * panel + kNR + ((k & 7) * PJ + jp) * 4, 4);
    const uint8x8_t v = vcreate_u8(raw);
    // Nibbles in k order: column c k0..k3, column c+1 k0..k3.
    const uint8x8_t codes = vzip1_u8(vand_u8(v, vdup_n_u8(0x0f)), vshr_n_u8(v, 4));
    const uint8x8_t t = vqtbl1_u8(table, codes);
    const float16x8_t h = vreinterpretq_f16_u8(vzip1q_u8(vdupq_n_u8(0), vcombine_u8(t, t)));
    const int c = 2 * jp;
    const float32x4_t x0 = vmulq_n_f32(vcvt_f32_f16(vget_low_f16(h)), f[pn][c]);
    const float32x4_t x1 = vmulq_n_f32(vcvt_high_f32_f16(h), f[pn][c + 1]);
    return vreinterpretq_bf16_u16(
        vuzp2q_u16(vreinterpretq_u16_f32(x0), vreinterpretq_u16_f32(x1)));
  }
};

// The MXFP4 decode GEMV's fast path (as the x86 tiles'): each accumulator is divided by its
// columns' block scales 2**(s - 127) for the block, so the weights enter unscaled: a k step
// of a panel (16 bytes, 32 weights) becomes its PJ bf16 operands by and/shift, two zips, four
// tbl (the bf16 bytes of e) and four zips, instead of fcvtl + fmul per 4 weights. Scaling by
// a power of two commutes with every rounding of BFMMLA (round-to-odd steps included) while
// nothing is subnormal or overflows in either domain; BFMMLA flushes subnormals, so the
// window (mxfp4.h kFast*: why it is exact there; the AVX-512 one) keeps every nonzero value
// normal in both: activations 0 or 2**kFastActMinExpFtz <= |a| <= 2**kFastActMaxExp,
// K < kFastMaxK, block scales in [kFastScaleMin, kFastScaleMax]. Other blocks run
// bfmmla::kernel() (exact).
// Between fast blocks the accumulators go from one block's scale to the next in one multiply.
namespace mxfp4_fast {

// The 2PJ scales of a panel's block in the window.
template <int PJ>
inline bool block_ok(const uint8_t* scales) {
  bool ok = true;
  CPUKERN_UNROLL for (int i = 0; i < 2 * PJ; ++i) ok &= mxfp4::fast_scale_ok(scales[i]);
  return ok;
}

// Per column pair jp of a panel: [f(2jp), f(2jp+1), f(2jp), f(2jp+1)], f = 2**(s_from - s_to)
// of the scales of two blocks (null: C, s = 127); in the window the exponent stays in
// [kFastStepMin, kFastStepMax] (mxfp4.h).
template <int PJ>
inline void step_factors(const uint8_t* from, const uint8_t* to, float32x4_t (&f)[PJ]) {
  constexpr int32_t kBias = mxfp4::kScaleBias;
  auto s = [](const uint8_t* blk, int i) { return blk ? int32_t(blk[i]) : kBias; };
  CPUKERN_UNROLL for (int jp = 0; jp < PJ; ++jp) {
    const int32_t e0 = kBias + s(from, 2 * jp) - s(to, 2 * jp);
    const int32_t e1 = kBias + s(from, 2 * jp + 1) - s(to, 2 * jp + 1);
    const int32x2_t e = vshl_n_s32(vset_lane_s32(e1, vdup_n_s32(e0), 1), 23);
    f[jp] = vreinterpretq_f32_s32(vcombine_s32(e, e));
  }
}

// The PJ bf16 operands of one k step of a panel (16 bytes: per column pair 4 bytes).
template <int PJ>
inline void operands(const uint8_t* q, uint8x16_t tlo, uint8x16_t thi, bfloat16x8_t (&b)[PJ]) {
  static_assert(PJ == 4 || PJ == 6, "a k step of a panel is 16 or 24 bytes");
  CPUKERN_UNROLL for (int h = 0; h < PJ / 2; ++h) {  // two column pairs per 8 bytes
    const uint8x8_t v = vld1_u8(q + 8 * h);
    // Nibbles in k order: column c k0..k3, column c+1 k0..k3 (per column pair).
    const uint8x16_t codes = vcombine_u8(vzip1_u8(vand_u8(v, vdup_n_u8(0x0f)), vshr_n_u8(v, 4)),
                                         vzip2_u8(vand_u8(v, vdup_n_u8(0x0f)), vshr_n_u8(v, 4)));
    const uint8x16_t lo = vqtbl1q_u8(tlo, codes), hi = vqtbl1q_u8(thi, codes);
    b[2 * h] = vreinterpretq_bf16_u8(vzip1q_u8(lo, hi));
    b[2 * h + 1] = vreinterpretq_bf16_u8(vzip2q_u8(lo, hi));
  }
}

}  // namespace mxfp4_fast

// The fast path as Mxfp4Src::FastGemv (Tile::tile): rows_ok admits the rows (and K), kernel
// runs them (each block checked by mxfp4_fast::block_ok).
template <int PJ>
struct Mxfp4Gemv {
  // Every bf16 of the first rp row pairs of an A block (k steps of 4 row pairs x 8 bf16), over
  // nb blocks, admitted (only the row pairs the kernel reads: this runs per tile call).
  static bool rows_ok(const bfloat16_t* a, int64_t nb, int rp) {
    if (nb * mxfp4::kBlock >= mxfp4::kFastMaxK) return false;
    const uint16_t* p = reinterpret_cast<const uint16_t*>(a);
    const uint16x8_t lo = vdupq_n_u16(mxfp4::kFastActLoBf16);
    const uint16x8_t hi = vdupq_n_u16(mxfp4::kFastActHiBf16);
    uint16x8_t bad = vdupq_n_u16(0);
    for (int64_t ks = 0; ks < nb * 8; ++ks)
      for (int q = 0; q < rp; ++q) {  // row pair q: 8 bf16 (2 rows x 4 k) of the k step's 32
        const uint16x8_t v = vandq_u16(vld1q_u16(p + ks * 32 + q * 8), vdupq_n_u16(0x7fff));
        const uint16x8_t out = vorrq_u16(vcltq_u16(v, lo), vcgtq_u16(v, hi));
        bad = vorrq_u16(bad, vbicq_u16(out, vceqzq_u16(v)));
      }
    return vmaxvq_u16(bad) == 0;
  }

  // RP row pairs x NJ column pairs (NJ / PJ panels), nb blocks; rows >= mrows not stored.
  template <int RP, int NJ>
  static void kernel(const bfloat16_t* a, const uint8_t* w, int64_t panel, int64_t nb, float* c,
                     int64_t ldc, int mrows, bool accumulate);
};

template <int PJ>
template <int RP, int NJ>
void Mxfp4Gemv<PJ>::kernel(const bfloat16_t* a, const uint8_t* w, int64_t panel, int64_t nb,
                           float* c, int64_t ldc, int mrows, bool accumulate) {
  constexpr int NPN = NJ / PJ, kBB = Mxfp4Src<PJ>::kBlockBytes;
  const uint8x16_t tlo = vld1q_u8(mxfp4::kBf16Lo), thi = vld1q_u8(mxfp4::kBf16Hi);
  float32x4_t acc[RP][NJ];
  load_acc(acc, c, ldc, mrows, accumulate);
  // The accumulators' domain: C, or divided by the scales of the previous fast block
  // (`scaled`); the next block's domain is one multiply away (as in avx2_fma_mxfp4.h).
  const uint8_t* scaled = nullptr;
  auto move_to = [&](const uint8_t* to) {  // a block, or null: C
    if (!scaled && !to) return;
    CPUKERN_UNROLL for (int pn = 0; pn < NPN; ++pn) {
      auto at = [&](const uint8_t* blk) { return blk ? blk + pn * panel : nullptr; };
      float32x4_t f[PJ];
      mxfp4_fast::step_factors<PJ>(at(scaled), at(to), f);
      CPUKERN_UNROLL for (int q = 0; q < RP; ++q)
        CPUKERN_UNROLL for (int jp = 0; jp < PJ; ++jp)
          acc[q][pn * PJ + jp] = vmulq_f32(acc[q][pn * PJ + jp], f[jp]);
    }
    scaled = to;
  };
  for (int64_t bi = 0; bi < nb; ++bi) {
    const uint8_t* blk = w + bi * kBB;
    bool fast = true;
    CPUKERN_UNROLL for (int pn = 0; pn < NPN; ++pn)
      fast &= mxfp4_fast::block_ok<PJ>(blk + pn * panel);
    if (!fast) {  // the exact decode for this block, through C
      move_to(nullptr);
      store_acc(acc, c, ldc, mrows);
      bfmmla::kernel<RP, NJ, PJ>(a + bi * 8 * 32, Mxfp4Src<PJ>(blk, panel), 8, c, ldc, mrows,
                                 true);
      load_acc(acc, c, ldc, mrows, true);
      continue;
    }
    move_to(blk);
    for (int k = 0; k < 8; ++k) {
      const bfloat16_t* ak = a + (bi * 8 + k) * 32;
      bfloat16x8_t av[RP];
      CPUKERN_UNROLL for (int q = 0; q < RP; ++q) av[q] = vld1q_bf16(ak + 8 * q);
      CPUKERN_UNROLL for (int pn = 0; pn < NPN; ++pn) {
        bfloat16x8_t b[PJ];
        mxfp4_fast::operands<PJ>(blk + pn * panel + 2 * PJ + k * 4 * PJ, tlo, thi, b);
        CPUKERN_UNROLL for (int jp = 0; jp < PJ; ++jp)
          CPUKERN_UNROLL for (int q = 0; q < RP; ++q)
            acc[q][pn * PJ + jp] = vbfmmlaq_f32(acc[q][pn * PJ + jp], av[q], b[jp]);
      }
    }
  }
  move_to(nullptr);
  store_acc(acc, c, ldc, mrows);
}

// The MXFP4 kernel of the same tile: k step = one 32-k block of every column of the panel.
template <int PJ>
struct Mxfp4Tile : Tile<PJ, Mxfp4Src> {
  static constexpr int kNR = 2 * PJ, kKR = mxfp4::kBlock, kAStep = 32 * 8;
  static constexpr int kStepW = Mxfp4Src<PJ>::kBlockBytes;
  static constexpr WeightFormat kFormat = WeightFormat::kMxfp4;
  using W = uint8_t;
  // Prefill (gemm_loop.h decoded_gemm): nk blocks of one panel -> the bf16 kernel's B operands
  // [k step][PJ column pairs][2][4] (the operands b() decodes in registers, stored).
  using Decoded = Tile<PJ>;
  static void decode_block(const uint8_t* src, int64_t nk, bf16_t* dst) {
    Mxfp4Src<PJ> s(src, 0);
    auto* d = reinterpret_cast<bfloat16_t*>(dst);
    for (int64_t b = 0; b < nk; ++b) {
      s.template block<1>(b);
      for (int k = 0; k < 8; ++k)
        CPUKERN_UNROLL for (int j = 0; j < PJ; ++j)
          vst1q_bf16(d + ((b * 8 + k) * PJ + j) * 8, s.b(k, j));
    }
  }
  static void pack_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t i,
                         void* dst) {  // k step ks holds bytes 2ks, 2ks+1 of each column pair
    mxfp4::pack_panels<kNR>(blocks, scales, o, i, kStepW, dst, [](int col, int j) {
      return ((j / 2) * PJ + col / 2) * 4 + (col % 2) * 2 + j % 2;
    });
  }
};

}  // namespace
}  // namespace cpukern::moe::bfmmla
