// Naming: ukernels/<isa>_<format>.h holds the register tile of the micro-kernels whose files end
// in __<isa> (here neon_bfmmla), for one weight format (here bf16; neon_bfmmla_mxfp4.h: MXFP4,
// which includes this header and reuses its tile).
//
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
#include <type_traits>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
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
  using FastGemv = void;  // no decode GEMV of its own (Tile::tile)
  const bfloat16_t* w;
  int64_t panel;  // bf16 from one panel to the next
  Bf16Src(const void* p, int64_t pn) : w(static_cast<const bfloat16_t*>(p)), panel(pn) {}
  void block(int64_t) {}
  bfloat16x8_t b(int64_t k, int j) const {
    return vld1q_bf16(w + (j / PJ) * panel + (k * PJ + j % PJ) * 8);
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
    // A source with a decode GEMV of its own (S::FastGemv: the MXFP4 fast path,
    // neon_bfmmla_mxfp4.h) runs the calls of up to 4 rows that it admits.
    if constexpr (!std::is_void_v<typename S::FastGemv> && M <= 4) {
      using F = typename S::FastGemv;
      constexpr int RP = (M + 1) / 2;  // row pairs that hold rows (one for 1-2 rows)
      if (F::rows_ok(ab, nk, RP)) {
        const auto* wq = reinterpret_cast<const uint8_t*>(w);
        if (np == 2)
          F::template kernel<RP, 2 * PJ>(ab, wq, panel, nk, c, ldc, M, accumulate);
        else
          F::template kernel<RP, PJ>(ab, wq, panel, nk, c, ldc, M, accumulate);
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

}  // namespace
}  // namespace cpukern::moe::bfmmla
