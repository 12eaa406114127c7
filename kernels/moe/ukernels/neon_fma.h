// The AArch64 NEON (no BF16) register tile of the fused-MoE kernels, written once over a
// weight source (bf16 pair words, or MXFP4 decoded in registers), so the bf16 and MXFP4
// kernels perform the same fp32 operations on the same weight values.
//
// bf16 weights widened to fp32 in registers (one 32-bit word holds the k and k+1 weights of a
// column: `<< 16` gives the first, `& 0xffff0000` the second), A rows pre-widened to fp32, FMA
// by lane; 4 rows x 16 columns. Each C element is one FMA chain in k order for every row count
// (batch-invariant); 1 row (decode) covers 2 panels per call to hide the FMA latency.
#pragma once
#include <arm_neon.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernels/pack_kpairs.h"

namespace cpukern::moe::neonfma {
namespace {  // internal linkage: compiled per ISA

constexpr int kNR = 16;

// bf16 weights: the panel's 32-bit words [k pair][16 columns].
struct Bf16Src {
  static constexpr int kPairsPerBlock = 0;
  const uint32_t* w;
  const uint32x4_t mask = vdupq_n_u32(0xffff0000u);
  explicit Bf16Src(const void* p) : w(static_cast<const uint32_t*>(p)) {}
  void block(int64_t) {}
  void pair(int64_t kk, float32x4_t* lo, float32x4_t* hi) const {
    const uint32_t* wk = w + kk * kNR;
    CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
      const uint32x4_t v = vld1q_u32(wk + 4 * q);
      lo[q] = vreinterpretq_f32_u32(vshlq_n_u32(v, 16));
      hi[q] = vreinterpretq_f32_u32(vandq_u32(v, mask));
    }
  }
};

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

// C[M][NP * 16] (= or +=) kh k pairs of A (M rows of stride lda, fp32) x the weights of NP
// panels (src[j], each from a block start). Every C element is one FMA chain in k order, the
// same for every M and NP (batch-invariant); a 1-row GEMV takes 2 panels (8 chains) to hide the
// FMA latency instead of splitting a sum.
template <int M, int NP, class Src>
inline void fma_tile(const float* a, int64_t lda, int64_t kh, Src* src, float* c, int64_t ldc,
                     bool accumulate) {
  constexpr int PB = Src::kPairsPerBlock;
  auto new_block = [&](int64_t kk) {
    if constexpr (PB > 0)
      if (kk % PB == 0)
        CPUKERN_UNROLL for (int j = 0; j < NP; ++j) src[j].block(kk / PB);
  };
  float32x4_t acc[NP][M][4];
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j)
    CPUKERN_UNROLL for (int r = 0; r < M; ++r)
      CPUKERN_UNROLL for (int q = 0; q < 4; ++q)
        acc[j][r][q] = accumulate ? vld1q_f32(c + r * ldc + j * kNR + 4 * q) : vdupq_n_f32(0.0f);
  auto step = [&](int64_t kk, const float32x4_t* av, auto lane_pair) {
    constexpr int L = decltype(lane_pair)::value;
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      float32x4_t lo[4], hi[4];
      src[j].pair(kk, lo, hi);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r)
        CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
          acc[j][r][q] = vfmaq_laneq_f32(acc[j][r][q], lo[q], av[r], 2 * L);
          acc[j][r][q] = vfmaq_laneq_f32(acc[j][r][q], hi[q], av[r], 2 * L + 1);
        }
    }
  };
  int64_t kk = 0;
  for (; kk + 2 <= kh; kk += 2) {
    float32x4_t av[M];
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) av[r] = vld1q_f32(a + r * lda + 2 * kk);
    new_block(kk);
    step(kk, av, std::integral_constant<int, 0>());
    step(kk + 1, av, std::integral_constant<int, 1>());
  }
  if (kk < kh) {  // last pair: the A rows are zero-padded to a multiple of 4
    float32x4_t av[M];
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) av[r] = vld1q_f32(a + r * lda + 2 * kk);
    new_block(kk);
    step(kk, av, std::integral_constant<int, 0>());
  }
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j)
    CPUKERN_UNROLL for (int r = 0; r < M; ++r)
      CPUKERN_UNROLL for (int q = 0; q < 4; ++q)
        vst1q_f32(c + r * ldc + j * kNR + 4 * q, acc[j][r][q]);
}

// The weight sources of panels w, w + panel, ...
template <class Src, class WT, size_t... J>
inline std::array<Src, sizeof...(J)> sources(const WT* w, int64_t panel,
                                             std::index_sequence<J...>) {
  return {Src(w + int64_t(J) * panel)...};
}

template <class Src>
struct Tile : KpairsTile<kNR> {
  // One row block (decode): 2 panels per call, so 1 row runs 8 chains.
  static constexpr int kMR = 4, kActW = 4, kNPGemv = 2;
  // K blocks of kKBlock with several row blocks (a panel's block stays in L1 for them all;
  // the decoded MXFP4 prefill uses the same blocks). Blocking never changes a sum.
  static constexpr bool kBlockK = true;
  using A = float;  // rows fp32 [m][round_up(k, 4)]: one vector holds two k pairs
  static int64_t a_stride(int64_t k) { return round_up(k, 4); }
  // Blocks of 4, 3 + 2 where that avoids a 1-row tail (4 chains on one panel): 5 = 3 + 2,
  // 9 = 4 + 3 + 2. Only the speed depends on the split, never the results.
  static int64_t rows(int64_t rem) { return rem <= kMR ? rem : rem == 5 ? 3 : kMR; }
  static constexpr auto pack_a = pack_a_f32<4>;
  template <int M, class WT>
  static void tile(const float* a, int64_t lda, int64_t nk, const WT* w, int64_t panel, int np,
                   float* c, int64_t ldc, bool accumulate, int64_t) {
    const int64_t kh = nk * (Src::kPairsPerBlock ? Src::kPairsPerBlock : 1);
    int j = 0;
    if constexpr (M == 1) {  // two panels per call: 8 independent chains
      for (; j + 2 <= np; j += 2) {
        auto src = sources<Src>(w + j * panel, panel, std::make_index_sequence<2>());
        fma_tile<M, 2>(a, lda, kh, src.data(), c + j * kNR, ldc, accumulate);
      }
    }
    for (; j < np; ++j) {
      Src src[1] = {Src(w + j * panel)};
      fma_tile<M, 1>(a, lda, kh, src, c + j * kNR, ldc, accumulate);
    }
  }
};

struct Mxfp4Tile : Tile<Mxfp4Src> {
  static constexpr int kKR = mxfp4::kBlock, kAStep = mxfp4::kBlock;
  static constexpr int kStepW = Mxfp4Src::kBlockBytes;
  static constexpr WeightFormat kFormat = WeightFormat::kMxfp4;
  using W = uint8_t;
  // Prefill (gemm_loop.h decoded_gemm): nk blocks of one panel -> the bf16 kernel's pair words
  // (the exact fp32 weights' high halves: odd k's kept, even k's shifted in below).
  using Decoded = Tile<Bf16Src>;
  static void decode_block(const uint8_t* src, int64_t nk, bf16_t* dst) {
    Mxfp4Src s(src);
    auto* d = reinterpret_cast<uint32_t*>(dst);
    for (int64_t b = 0; b < nk; ++b) {
      s.block(b);
      for (int kk = 0; kk < 16; ++kk) {
        float32x4_t lo[4], hi[4];
        s.pair(kk, lo, hi);
        CPUKERN_UNROLL for (int q = 0; q < 4; ++q)
          vst1q_u32(d + (b * 16 + kk) * kNR + 4 * q,
                    vsriq_n_u32(vreinterpretq_u32_f32(hi[q]), vreinterpretq_u32_f32(lo[q]), 16));
      }
    }
  }
  static void pack_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t i,
                         void* dst) {  // code byte j of a column: row j of the panel
    mxfp4::pack_panels<kNR>(blocks, scales, o, i, kStepW, dst,
                            [](int col, int j) { return j * kNR + col; });
  }
};

}  // namespace
}  // namespace cpukern::moe::neonfma
