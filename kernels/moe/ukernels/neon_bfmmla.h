// The BFMMLA register tiles and packers, shared by the BFMMLA micro-kernels (compiled with
// -march=armv8.2-a+bf16 only); each micro-kernel file picks a panel width.
//
// vbfmmlaq_f32(acc, a, b): acc (2x2 fp32) += A (2x4 bf16) * B (4x2 bf16), where a holds 4 k of
// row 0 then 4 k of row 1, and b 4 k of column 0 then 4 k of column 1. An accumulator therefore
// holds a 2x2 block of C as [r0c0 r0c1 r1c0 r1c1].
//
// Packings ("bf16p<NR>x4"): weights [ceil(o/NR)][Kp/4][NR/2 column pairs][2][4] bf16; A per
// block of 8 rows [Kp/4][4 row pairs][2][4] bf16, rows past m and k past K zero. Row r of a
// block is row pair r / 2, half r % 2 (the ukernel row-placement test checks every height).
#pragma once
#include <arm_neon.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/mxfp4.h"

namespace cpukern::moe::bfmmla {
namespace {  // internal linkage: compiled per ISA

// Loads 4 columns of rows r0 and r1 of C (zeros when !load or a row is missing: nullptr) and
// interleaves them into the accumulators of column pairs (0,1) and (2,3).
inline void init_cols4(const float* r0, const float* r1, bool load, float32x4_t& a01,
                       float32x4_t& a23) {
  float32x4_t x = vdupq_n_f32(0.0f), y = x;
  if (load && r0) x = vld1q_f32(r0);
  if (load && r1) y = vld1q_f32(r1);
  const float64x2_t dx = vreinterpretq_f64_f32(x), dy = vreinterpretq_f64_f32(y);
  a01 = vreinterpretq_f32_f64(vzip1q_f64(dx, dy));
  a23 = vreinterpretq_f32_f64(vzip2q_f64(dx, dy));
}

// The inverse: writes 4 columns of the rows that exist (r0 / r1 nullptr: skipped).
inline void store_cols4(float* r0, float* r1, float32x4_t a01, float32x4_t a23) {
  const float64x2_t d01 = vreinterpretq_f64_f32(a01), d23 = vreinterpretq_f64_f32(a23);
  if (r0) vst1q_f32(r0, vreinterpretq_f32_f64(vzip1q_f64(d01, d23)));
  if (r1) vst1q_f32(r1, vreinterpretq_f32_f64(vzip2q_f64(d01, d23)));
}

// B operands of bf16 weights: [panel][k step][PJ column pairs][2][4] bf16.
template <int PJ>
struct Bf16Src {
  static constexpr int kStepsPerBlock = 0;
  const bfloat16_t* w;
  int64_t panel;  // bf16 from one panel to the next
  Bf16Src(const void* p, int64_t pn) : w(static_cast<const bfloat16_t*>(p)), panel(pn) {}
  void block(int64_t) {}
  bfloat16x8_t b(int64_t k, int j) const {
    return vld1q_bf16(w + (j / PJ) * panel + (k * PJ + j % PJ) * 8);
  }
};

// B operands decoded from MXFP4 ("mxfp4p<2PJ>x4": per panel per block of 32 k, the 2PJ
// columns' scales, then per k step (4 k) per column pair 4 bytes: column c's k0k1, k2k3 bytes,
// column c+1's, as stored on disk; 17 bytes per 32 weights). Per operand: tbl maps the
// nibbles to the high bytes of their fp16 values, fcvtl widens to fp32, one multiply by
// 2**(s - 127) gives the exact weight, and its high half is the weight's bf16 (exact).
template <int PJ>
struct Mxfp4Src {
  static constexpr int kStepsPerBlock = 8, kNR = 2 * PJ, kBlockBytes = kNR * 17;
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

// RP row pairs x NJ column pairs, the pairs taken PJ per panel from consecutive panels; rows
// >= mrows are neither loaded nor stored. a: an A block at its k step; src: the weights of the
// first panel at the same k step (a block start for MXFP4); ks k steps (4 k each).
// C rows [0, mrows) of RP row pairs x NJ column pairs <-> the accumulators.
template <int RP, int NJ>
inline void load_acc(float32x4_t (&acc)[RP][NJ], const float* c, int64_t ldc, int mrows,
                     bool accumulate) {
  CPUKERN_UNROLL for (int q = 0; q < RP; ++q) {
    const float* r0 = 2 * q < mrows ? c + 2 * q * ldc : nullptr;
    const float* r1 = 2 * q + 1 < mrows ? c + (2 * q + 1) * ldc : nullptr;
    CPUKERN_UNROLL for (int g = 0; g < NJ / 2; ++g)
      init_cols4(r0 ? r0 + 4 * g : nullptr, r1 ? r1 + 4 * g : nullptr, accumulate,
                 acc[q][2 * g], acc[q][2 * g + 1]);
  }
}
template <int RP, int NJ>
inline void store_acc(const float32x4_t (&acc)[RP][NJ], float* c, int64_t ldc, int mrows) {
  CPUKERN_UNROLL for (int q = 0; q < RP; ++q) {
    float* r0 = 2 * q < mrows ? c + 2 * q * ldc : nullptr;
    float* r1 = 2 * q + 1 < mrows ? c + (2 * q + 1) * ldc : nullptr;
    CPUKERN_UNROLL for (int g = 0; g < NJ / 2; ++g)
      store_cols4(r0 ? r0 + 4 * g : nullptr, r1 ? r1 + 4 * g : nullptr, acc[q][2 * g],
                  acc[q][2 * g + 1]);
  }
}

template <int RP, int NJ, int PJ, class Src>
void kernel(const bfloat16_t* a, Src src, int64_t ks, float* c, int64_t ldc, int mrows,
            bool accumulate) {
  float32x4_t acc[RP][NJ];
  load_acc(acc, c, ldc, mrows, accumulate);
  // The operands of the shorter side stay in registers for the k step, the other side streams
  // one vector at a time (fewest live registers: 4x4 as 16 + 4 + 1, 4x6 as 24 + 4 + 1).
  for (int64_t k = 0; k < ks; ++k) {
    if constexpr (Src::kStepsPerBlock > 0) {
      if (k % Src::kStepsPerBlock == 0) src.template block<(NJ + PJ - 1) / PJ>(k / Src::kStepsPerBlock);
    }
    const bfloat16_t* ak = a + k * 32;
    auto b_at = [&](int j) { return src.b(k, j); };
    if constexpr (NJ <= RP) {
      bfloat16x8_t b[NJ];
      CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) b[j] = b_at(j);
      CPUKERN_UNROLL for (int q = 0; q < RP; ++q) {
        const bfloat16x8_t av = vld1q_bf16(ak + 8 * q);
        CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) acc[q][j] = vbfmmlaq_f32(acc[q][j], av, b[j]);
      }
    } else {
      bfloat16x8_t av[RP];
      CPUKERN_UNROLL for (int q = 0; q < RP; ++q) av[q] = vld1q_bf16(ak + 8 * q);
      CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) {
        // 24 accumulators: keep GCC from hoisting every B load of the step (it would spill).
        if constexpr (RP * (NJ + 1) + NJ > 32) asm volatile("" ::: "memory");
        const bfloat16x8_t b = b_at(j);
        CPUKERN_UNROLL for (int q = 0; q < RP; ++q) acc[q][j] = vbfmmlaq_f32(acc[q][j], av[q], b);
      }
    }
  }
  store_acc(acc, c, ldc, mrows);
}

// The MXFP4 decode GEMV's fast path (as the x86 tiles'): each accumulator is divided by its
// columns' block scales 2**(s - 127) for the block, so the weights enter unscaled: a k step
// of a panel (16 bytes, 32 weights) becomes its PJ bf16 operands by and/shift, two zips, four
// tbl (the bf16 bytes of e) and four zips, instead of fcvtl + fmul per 4 weights. Scaling by
// a power of two commutes with every rounding of BFMMLA (round-to-odd steps included) while
// nothing is subnormal or overflows in either domain; BFMMLA flushes subnormals, so the
// window keeps every nonzero value normal in both (the AVX-512 one): activations 0 or
// 2**-40 <= |a| <= 2**32, block scales in [95, 159]. Other blocks run kernel() (exact).
// Between fast blocks the accumulators go from one block's scale to the next in one multiply.
namespace mxfp4_fast {

// Every bf16 of the first rp row pairs of an A block (k steps of 4 row pairs x 8 bf16), over
// nb blocks, admitted (only the row pairs the kernel reads: this runs per tile call).
inline bool rows_ok(const bfloat16_t* a, int64_t nb, int rp) {
  if (nb * 32 >= (int64_t(1) << 28)) return false;
  const uint16_t* p = reinterpret_cast<const uint16_t*>(a);
  const uint16x8_t lo = vdupq_n_u16((127 - 40) << 7), hi = vdupq_n_u16((127 + 32) << 7);
  uint16x8_t bad = vdupq_n_u16(0);
  for (int64_t ks = 0; ks < nb * 8; ++ks)
    for (int q = 0; q < rp; ++q) {  // row pair q: 8 bf16 (2 rows x 4 k) of the k step's 32
      const uint16x8_t v = vandq_u16(vld1q_u16(p + ks * 32 + q * 8), vdupq_n_u16(0x7fff));
      const uint16x8_t out = vorrq_u16(vcltq_u16(v, lo), vcgtq_u16(v, hi));
      bad = vorrq_u16(bad, vbicq_u16(out, vceqzq_u16(v)));
    }
  return vmaxvq_u16(bad) == 0;
}

// The 2PJ scales of a panel's block in [95, 159].
template <int PJ>
inline bool block_ok(const uint8_t* scales) {
  bool ok = true;
  CPUKERN_UNROLL for (int i = 0; i < 2 * PJ; ++i) ok &= uint8_t(scales[i] - 95) <= 64;
  return ok;
}

// Per column pair jp of a panel: [f(2jp), f(2jp+1), f(2jp), f(2jp+1)], f = 2**(s_from - s_to)
// of the scales of two blocks (null: C, s = 127); in the window the exponent stays in [63, 191].
template <int PJ>
inline void step_factors(const uint8_t* from, const uint8_t* to, float32x4_t (&f)[PJ]) {
  auto s = [](const uint8_t* blk, int i) { return blk ? int32_t(blk[i]) : 127; };
  CPUKERN_UNROLL for (int jp = 0; jp < PJ; ++jp) {
    const int32_t e0 = 127 + s(from, 2 * jp) - s(to, 2 * jp);
    const int32_t e1 = 127 + s(from, 2 * jp + 1) - s(to, 2 * jp + 1);
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

// RP row pairs x NJ column pairs (NJ / PJ panels), nb blocks; rows >= mrows not stored.
template <int RP, int NJ, int PJ>
void kernel(const bfloat16_t* a, const uint8_t* w, int64_t panel, int64_t nb, float* c,
            int64_t ldc, int mrows, bool accumulate) {
  constexpr int NPN = NJ / PJ, kBB = Mxfp4Src<PJ>::kBlockBytes;
  const uint8x16_t tlo = vld1q_u8(mxfp4::kBf16Lo), thi = vld1q_u8(mxfp4::kBf16Hi);
  float32x4_t acc[RP][NJ];
  load_acc(acc, c, ldc, mrows, accumulate);
  // The accumulators' domain: C, or divided by the scales of the previous fast block
  // (`scaled`); the next block's domain is one multiply away (as in avx2_fma.h).
  const uint8_t* scaled = nullptr;
  auto move_to = [&](const uint8_t* to) {  // a block, or null: C
    if (!scaled && !to) return;
    CPUKERN_UNROLL for (int pn = 0; pn < NPN; ++pn) {
      auto at = [&](const uint8_t* blk) { return blk ? blk + pn * panel : nullptr; };
      float32x4_t f[PJ];
      step_factors<PJ>(at(scaled), at(to), f);
      CPUKERN_UNROLL for (int q = 0; q < RP; ++q)
        CPUKERN_UNROLL for (int jp = 0; jp < PJ; ++jp)
          acc[q][pn * PJ + jp] = vmulq_f32(acc[q][pn * PJ + jp], f[jp]);
    }
    scaled = to;
  };
  for (int64_t bi = 0; bi < nb; ++bi) {
    const uint8_t* blk = w + bi * kBB;
    bool fast = true;
    CPUKERN_UNROLL for (int pn = 0; pn < NPN; ++pn) fast &= block_ok<PJ>(blk + pn * panel);
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
        operands<PJ>(blk + pn * panel + 2 * PJ + k * 4 * PJ, tlo, thi, b);
        CPUKERN_UNROLL for (int jp = 0; jp < PJ; ++jp)
          CPUKERN_UNROLL for (int q = 0; q < RP; ++q)
            acc[q][pn * PJ + jp] = vbfmmlaq_f32(acc[q][pn * PJ + jp], av[q], b[jp]);
      }
    }
  }
  move_to(nullptr);
  store_acc(acc, c, ldc, mrows);
}

}  // namespace mxfp4_fast

// Tile traits (gemm_loop.h) of panels of PJ column pairs: 8 rows x 2 PJ columns (4 PJ
// accumulators), and for blocks of up to 4 rows 2 row pairs x two panels (as many).
template <int PJ, template <int> class SrcT = Bf16Src>
struct Tile : TileDefaults {
  static constexpr int kMR = 8, kNR = 2 * PJ, kKR = 4, kNP = 2, kARows = 8, kAStep = 32;
  static constexpr int kActW = 4;
  static constexpr bool kBlockK = true;  // K blocks with several row blocks (as the x86 tiles)
  using A = bf16_t;
  static int64_t a_stride(int64_t k) { return round_up(k, kKR); }
  static int64_t rows(int64_t rem) { return std::min<int64_t>(kMR, rem); }

  static void pack(const bf16_t* w, int64_t o, int64_t i, void* dst) {
    const int64_t kp = round_up(i, kKR), panels = (o + kNR - 1) / kNR;
    bf16_t* d = static_cast<bf16_t*>(dst);
    for (int64_t p = 0; p < panels; ++p)
      for (int64_t kb = 0; kb < kp / 4; ++kb)
        CPUKERN_UNROLL for (int c = 0; c < kNR; ++c) {  // c = 2 * pair + column within the pair
          const int64_t col = p * kNR + c;
          bf16_t* out = d + ((p * (kp / 4) + kb) * kNR + c) * 4;
          CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
            const int64_t k = kb * 4 + q;
            out[q] = (col < o && k < i) ? w[col * i + k] : bf16_t(0);
          }
        }
  }

  static void pack_a(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k,
                     void* dst) {
    const int64_t kp = round_up(k, kKR), blocks = (m + 7) / 8;
    bf16_t* d = static_cast<bf16_t*>(dst);
    for (int64_t b = 0; b < blocks; ++b) {
      bf16_t* db = d + b * 8 * kp;
      CPUKERN_UNROLL for (int rr = 0; rr < 8; ++rr) {
        const int64_t r = b * 8 + rr;
        const bf16_t* src = r < m ? a + (rows ? int64_t(rows[r]) : r) * lda : nullptr;
        for (int64_t kb = 0; kb < kp / 4; ++kb) {
          bf16_t* out = db + (kb * 8 + rr) * 4;
          CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
            const int64_t kk = kb * 4 + q;
            out[q] = (src && kk < k) ? src[kk] : bf16_t(0);
          }
        }
      }
    }
  }

  // nk k steps: 4 k (bf16) or blocks of 32 k (MXFP4); panel: W from one panel to the next.
  template <int M, class WT>
  static void tile(const bf16_t* a, int64_t, int64_t nk, const WT* w, int64_t panel, int np,
                   float* c, int64_t ldc, bool accumulate, int64_t) {
    using S = SrcT<PJ>;
    const int64_t ks = nk * (S::kStepsPerBlock ? S::kStepsPerBlock : 1);
    const auto* ab = reinterpret_cast<const bfloat16_t*>(a);
    if constexpr (std::is_same_v<S, Mxfp4Src<PJ>> && M <= 4) {
      constexpr int RP = (M + 1) / 2;  // row pairs that hold rows (one for 1-2 rows)
      if (mxfp4_fast::rows_ok(ab, nk, RP)) {
        const auto* wq = reinterpret_cast<const uint8_t*>(w);
        if (np == 2)
          mxfp4_fast::kernel<RP, 2 * PJ, PJ>(ab, wq, panel, nk, c, ldc, M, accumulate);
        else
          mxfp4_fast::kernel<RP, PJ, PJ>(ab, wq, panel, nk, c, ldc, M, accumulate);
        return;
      }
    }
    if constexpr (M > 4) {
      for (int j = 0; j < np; ++j)
        kernel<4, PJ, PJ>(ab, S(w + j * panel, panel), ks, c + j * kNR, ldc, M, accumulate);
    } else if (np == 2) {
      kernel<2, 2 * PJ, PJ>(ab, S(w, panel), ks, c, ldc, M, accumulate);
    } else {
      kernel<2, PJ, PJ>(ab, S(w, panel), ks, c, ldc, M, accumulate);
    }
  }
};

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
