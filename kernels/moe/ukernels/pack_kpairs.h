// Packers (and tile traits) shared by the widen+FMA, dot-product and scalar kernels.
//
// pack_kpairs<NR> ("bf16p<NR>x2" layouts): per panel of NR output columns, per pair of k, NR
// 32-bit words each holding (w[col][k], w[col][k+1]) as (low, high) halves:
// [ceil(o/NR)][Kp/2][NR][2] bf16, K padded to even with zeros, missing columns zero. One 32-bit
// word then widens to two fp32 lanes with a shift and a mask, and is exactly the operand pair
// vdpbf16ps consumes.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/common/bf16.h"
#include "kernels/moe/gemm_loop.h"

namespace cpukern::moe {
namespace {  // internal linkage: compiled per ISA

template <int NR>
void pack_kpairs(const bf16_t* w, int64_t o, int64_t i, void* dst) {
  bf16_t* d = static_cast<bf16_t*>(dst);
  const int64_t kp = (i + 1) / 2 * 2, panels = (o + NR - 1) / NR;
  for (int64_t p = 0; p < panels; ++p) {
    bf16_t* dp = d + p * NR * kp;
    for (int64_t kk = 0; kk < kp / 2; ++kk) {
      for (int c = 0; c < NR; ++c) {
        const int64_t col = p * NR + c;
        const int64_t k0 = 2 * kk, k1 = 2 * kk + 1;
        dp[(kk * NR + c) * 2 + 0] = (col < o && k0 < i) ? w[col * i + k0] : bf16_t(0);
        dp[(kk * NR + c) * 2 + 1] = (col < o && k1 < i) ? w[col * i + k1] : bf16_t(0);
      }
    }
  }
}

// A rows kept bf16, [round_up(m, ROWS)][round_up(k, KP)], zero past k and in the rows past m.
template <int KP, int ROWS>
void pack_a_bf16(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k,
                 void* dst) {
  const int64_t kp = (k + KP - 1) / KP * KP;
  bf16_t* d = static_cast<bf16_t*>(dst);
  for (int64_t r = 0; r < m; ++r) {
    const bf16_t* src = a + (rows ? int64_t(rows[r]) : r) * lda;
    std::memcpy(d + r * kp, src, size_t(k) * 2);
    std::memset(d + r * kp + k, 0, size_t(kp - k) * 2);
  }
  std::memset(d + m * kp, 0, size_t((m + ROWS - 1) / ROWS * ROWS - m) * size_t(kp) * 2);
}

// A rows widened to fp32, [m][round_up(k, KP)], zero past k.
template <int KP>
void pack_a_f32(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k,
                void* dst) {
  const int64_t kp = (k + KP - 1) / KP * KP;
  for (int64_t r = 0; r < m; ++r) {
    const bf16_t* src = a + (rows ? int64_t(rows[r]) : r) * lda;
    float* dr = static_cast<float*>(dst) + r * kp;
    for (int64_t j = 0; j < k; ++j) dr[j] = bf16_to_f32(src[j]);
    for (int64_t j = k; j < kp; ++j) dr[j] = 0.0f;
  }
}

// Tile traits (gemm_loop.h) every bf16p<NR>x2 kernel shares: k pairs, A rows [m][round_up(k, 2)].
template <int NR>
struct KpairsTile : TileDefaults {
  static constexpr int kNR = NR, kKR = 2, kAStep = 2;
  static int64_t a_stride(int64_t k) { return round_up(k, kKR); }
  static constexpr auto pack = pack_kpairs<NR>;
};

// Tile traits of the fp32 scalar oracles (one per weight format Wt): A rows widened to fp32,
// one output column per panel, four columns per call for instruction-level parallelism, each
// C element one sequential fp32 sum over k (multiply, then add). Wt gives W, kKR (k per step),
// kStepW (W per column k step) and value(step, q): the exact fp32 value of weight q of the
// column's k step at `step`.
template <class Wt>
struct ScalarColumnsTile : TileDefaults {
  static constexpr int kMR = 1, kNR = 1, kNP = 4, kActW = 4;
  static constexpr int kKR = Wt::kKR, kAStep = Wt::kKR, kStepW = Wt::kStepW;
  using A = float;
  using W = typename Wt::W;
  static int64_t a_stride(int64_t k) { return k; }
  static int64_t rows(int64_t) { return 1; }
  static constexpr auto pack_a = pack_a_f32<1>;
  template <int M>
  static void tile(const float* a, int64_t, int64_t nk, const W* w, int64_t panel, int np,
                   float* c, int64_t, bool accumulate, int64_t) {
    if (np == 4) return columns<4>(a, nk, w, panel, c, accumulate);
    for (int j = 0; j < np; ++j) columns<1>(a, nk, w + j * panel, panel, c + j, accumulate);
  }
  template <int N>
  static void columns(const float* a, int64_t nk, const W* w, int64_t panel, float* c,
                      bool accumulate) {
    float s[N] = {};
    for (int64_t b = 0; b < nk; ++b, a += kKR, w += kStepW)
      for (int q = 0; q < kKR; ++q)
        for (int j = 0; j < N; ++j) s[j] += a[q] * Wt::value(w + j * panel, q);
    for (int j = 0; j < N; ++j) c[j] = accumulate ? c[j] + s[j] : s[j];
  }
};

}  // namespace
}  // namespace cpukern::moe
