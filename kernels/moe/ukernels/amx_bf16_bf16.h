// The AMX BF16 tile of the fused-MoE kernels (TDPBF16PS), on the avx512_bf16 kernels' bf16p32x2
// weights: a B tile is 16 k pairs x 16 columns of a panel's pair words (rows 128 bytes apart),
// so both read one packing and the amx variant runs the AVX-512 tile for small calls
// (ukernel.h ukernel_for_call). 32 rows x 32 columns per call: C in tiles 0-3 (row groups of
// 16 x column halves), A in 4-5, B in 6-7; per 32 k, 2 A and 2 B loads feed 4 TDPBF16PS.
//
// Compiled natively (-mamx-*) or, with CPUKERN_SIMDE / CPUKERN_AMX_EMULATION, against
// kernels/common/amx_emulation.h (tests on any host).
//
// Batch invariance: each C element gets, per 32 k (one TDPBF16PS), the instruction's
// even/odd pair sums added into C, in k order, for every row count (rows are independent in
// a tile, and padding rows are zero); the K blocks continue the sum through C (exact). The
// last partial 32 k of a panel run over a zero-padded copy of its pairs, the same for every M.
#pragma once
#if defined(CPUKERN_SIMDE) || defined(CPUKERN_AMX_EMULATION)
#include "kernels/common/amx_emulation.h"
#else
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/pack_kpairs.h"

namespace cpukern::moe::amx {
namespace {  // internal linkage: compiled per ISA

constexpr int kNR = 32;
// Calls with more (token, expert) rows per expert than this run the tiles. kt-kernel's
// switch (AVX-512 for T <= 4 E / topk, AMX above); not measured here (no AMX host yet).
constexpr int kTilesMinRowsPerExpert = 4;

// LDTILECFG's 64 bytes: palette 1, every tile 16 rows x 64 bytes. A constant in memory:
// GCC 12's _tile_loadconfig tells the compiler it reads 8 bytes only, so a stack copy might
// be left partly unwritten.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(TileConfig) == 64);
constexpr TileConfig kTileConfig{};

// GCC 12's _tile_loadd asm does not say that it reads memory: this compiler barrier keeps the
// stores that fill a buffer just before a tile load (staged C rows, a zero-padded K tail)
// from being moved after it or dropped as dead. It emits no instruction.
inline void tile_inputs_written() { __asm__ volatile("" ::: "memory"); }

// The tile configuration of one gemm call (gemm_loop.h Scope): loaded before the first tile,
// released after the last (TILERELEASE returns the tile state to INIT, so the kernel's
// XSAVE area for this thread stays small between calls).
struct TileScope {
  TileScope() { _tile_loadconfig(&kTileConfig); }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

// Moves the first `rows` rows of a 32-column C block between C (ldc) and a 16-row buffer
// (tile loads and stores move whole 16-row tiles; C may end sooner). Rows past `rows` of the
// buffer are zero.
inline void stage_in(const float* c, int64_t ldc, int rows, float* buf) {
  for (int r = 0; r < rows; ++r) std::memcpy(buf + r * kNR, c + r * ldc, kNR * sizeof(float));
  std::memset(buf + rows * kNR, 0, size_t(16 - rows) * kNR * sizeof(float));
}
inline void stage_out(const float* buf, int rows, float* c, int64_t ldc) {
  for (int r = 0; r < rows; ++r) std::memcpy(c + r * ldc, buf + r * kNR, kNR * sizeof(float));
}

struct Bf16Tile : KpairsTile<kNR> {
  static constexpr int kMR = 32, kActW = 16, kARows = 16;  // A tiles load 16 rows
  static constexpr bool kBlockK = true;
  using A = bf16_t;
  using Scope = TileScope;
  // A rows: whole 32-k tile columns (zero past k).
  static int64_t a_stride(int64_t k) { return round_up(k, 32); }
  static int64_t rows(int64_t rem) { return std::min<int64_t>(rem, kMR); }
  static constexpr auto pack_a = pack_a_bf16<32, 16>;

  // One TDPBF16PS step of 32 k: A rows (a, 1-2 groups of 16) x the panel's 16 pair rows at w.
  template <bool kTwoGroups>
  static void step(const bf16_t* a, int64_t lda, const bf16_t* w) {
    _tile_loadd(4, a, lda * 2);
    _tile_loadd(6, w, 2 * kNR * 2);
    _tile_loadd(7, w + 16 * 2, 2 * kNR * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwoGroups) {
      _tile_loadd(5, a + 16 * lda, lda * 2);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }

  // C[M][32] (= or +=) nk k pairs of A x one panel (np = 1: kNP).
  template <int M, class WT>
  static void tile(const bf16_t* a, int64_t lda, int64_t nk, const WT* w, int64_t, int,
                   float* c, int64_t ldc, bool accumulate, int64_t) {
    constexpr int M0 = M < 16 ? M : 16, M1 = M - M0;  // rows of the two row groups
    alignas(64) float part[16 * kNR];                 // the partial group's C rows
    float* const c1 = c + 16 * ldc;
    float* const g0 = M0 == 16 ? c : part;
    float* const g1 = M1 == 16 ? c1 : part;
    const int64_t s0 = (M0 == 16 ? ldc : kNR) * 4, s1 = (M1 == 16 ? ldc : kNR) * 4;
    tile_inputs_written();  // A, the weights and C as the caller left them
    if (accumulate) {
      if constexpr (M0 < 16) stage_in(c, ldc, M0, part);
      tile_inputs_written();
      _tile_loadd(0, g0, s0);
      _tile_loadd(1, g0 + 16, s0);
      if constexpr (M1 > 0) {
        if constexpr (M1 < 16) stage_in(c1, ldc, M1, part);
        tile_inputs_written();
        _tile_loadd(2, g1, s1);
        _tile_loadd(3, g1 + 16, s1);
      }
    } else {
      _tile_zero(0);
      _tile_zero(1);
      if constexpr (M1 > 0) {
        _tile_zero(2);
        _tile_zero(3);
      }
    }
    const int64_t full = nk / 16, tail = nk % 16;
    const bf16_t* wp = reinterpret_cast<const bf16_t*>(w);
    for (int64_t kb = 0; kb < full; ++kb)
      step<(M1 > 0)>(a + 32 * kb, lda, wp + kb * 16 * 2 * kNR);
    if (tail) {
      // The panel's last pairs, zero past them (a B tile would read into the next panel).
      alignas(64) bf16_t last[16 * 2 * kNR];
      std::memcpy(last, wp + full * 16 * 2 * kNR, size_t(tail) * 2 * kNR * 2);
      std::memset(last + tail * 2 * kNR, 0, size_t(16 - tail) * 2 * kNR * 2);
      tile_inputs_written();
      step<(M1 > 0)>(a + 32 * full, lda, last);
    }
    _tile_stored(0, g0, s0);
    _tile_stored(1, g0 + 16, s0);
    if constexpr (M0 < 16) stage_out(part, M0, c, ldc);
    if constexpr (M1 > 0) {
      _tile_stored(2, g1, s1);
      _tile_stored(3, g1 + 16, s1);
      if constexpr (M1 < 16) stage_out(part, M1, c1, ldc);
    }
  }
};

}  // namespace
}  // namespace cpukern::moe::amx
