// The AMX INT8 tile of the fused-MoE int8 (W8A8) kernels (TDPBSSD), on the VNNI kernels'
// qc8wp16x4 weights: a panel's k steps (16 columns x 4 k, 64 bytes) are the rows of a B tile,
// so both read one packing. 32 rows x 2 panels per call: int32 C in tiles 0-3, A (int8 rows,
// signed: no offset, unlike vpdpbusd) in 4-5, B in 6-7; per 64 k, 4 TDPBSSD. The sums are
// exact integers (int8.h bounds K), so the results are bitwise the VNNI kernels' and the
// scalar reference's whatever the tile shapes; the epilogue is gemm_loop.h's.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/moe/ukernels/amx_bf16_bf16.h"  // the tile configuration and the intrinsics
#include "kernels/moe/gemm_loop.h"

namespace cpukern::moe::amx {
namespace {  // internal linkage: compiled per ISA

struct Int8Tile : Int8TileDefaults {
  static constexpr int kMR = 32, kNR = 16, kKR = 4, kNP = 2, kActW = 16, kARows = 16;
  using A = int8_t;
  using Scope = TileScope;
  // A rows: whole 64-k tile columns (zero past k); 16-row groups (zero rows past m).
  static int64_t a_stride(int64_t k) { return round_up(k, 64); }
  static int64_t rows(int64_t rem) { return std::min<int64_t>(rem, kMR); }
  static int w_at(int col, int kk) { return col * kKR + kk; }

  // One step of 64 k: A row groups (1-2) x panels (1-2).
  template <bool kTwoGroups, bool kTwoPanels>
  static void step(const int8_t* a, int64_t lda, const int8_t* w0, const int8_t* w1) {
    _tile_loadd(4, a, lda);
    _tile_loadd(6, w0, 64);
    _tile_dpbssd(0, 4, 6);
    if constexpr (kTwoPanels) {
      _tile_loadd(7, w1, 64);
      _tile_dpbssd(1, 4, 7);
    }
    if constexpr (kTwoGroups) {
      _tile_loadd(5, a + 16 * lda, lda);
      _tile_dpbssd(2, 5, 6);
      if constexpr (kTwoPanels) _tile_dpbssd(3, 5, 7);
    }
  }
  template <bool kTwoGroups, bool kTwoPanels>
  static void steps(const int8_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel) {
    const int64_t full = ks / 16, tail = ks % 16;
    for (int64_t kb = 0; kb < full; ++kb)
      step<kTwoGroups, kTwoPanels>(a + 64 * kb, lda, w + kb * 1024, w + panel + kb * 1024);
    if (tail) {  // the panels' last k steps, zero past them (a B tile would read on)
      alignas(64) int8_t last[2][1024] = {};
      std::memcpy(last[0], w + full * 1024, size_t(tail) * 64);
      if constexpr (kTwoPanels) std::memcpy(last[1], w + panel + full * 1024, size_t(tail) * 64);
      tile_inputs_written();
      step<kTwoGroups, kTwoPanels>(a + 64 * full, lda, last[0], last[1]);
    }
  }

  // acc[r][j * 16 + c] = the exact sum over ks k steps, r < M (stores whole 16-row tiles:
  // acc holds kMR rows), j < np <= 2.
  template <int M>
  static void tile(const int8_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                   int np, int32_t* acc, int64_t ldacc) {
    constexpr bool kTwoGroups = M > 16;
    tile_inputs_written();  // A and the weights as the caller left them
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    if (np == 2)
      steps<kTwoGroups, true>(a, lda, ks, w, panel);
    else
      steps<kTwoGroups, false>(a, lda, ks, w, panel);
    const int64_t s = ldacc * 4;
    _tile_stored(0, acc, s);
    if (np == 2) _tile_stored(1, acc + 16, s);
    if constexpr (kTwoGroups) {
      _tile_stored(2, acc + 16 * ldacc, s);
      if (np == 2) _tile_stored(3, acc + 16 * ldacc + 16, s);
    }
  }
};

}  // namespace
}  // namespace cpukern::moe::amx
