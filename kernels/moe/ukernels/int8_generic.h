// A portable int8 (W8A8) tile in plain C++, compiled by each ISA library that has no int8 tile
// of its own yet (the compiler vectorises it with that library's flags): 4 rows x 16 columns,
// k steps of 4. Layout "qc8wp16x4": per panel of 16 columns, per 4 k, the 16 columns' 4
// consecutive int8 weights ([k step][16 columns][4 k]): the operand order of NEON SDOT
// (vdotq_laneq_s32: 4 int8 per int32 lane, one column per lane) and of AVX-512 VNNI
// (vpdpbusd), so an SDOT/VNNI tile can replace this one with the same packer.
#pragma once
#include <cstdint>

#include "kernels/moe/gemm_loop.h"

namespace cpukern::moe {
namespace {  // internal linkage: compiled per ISA

struct Int8GenericTile : Int8TileDefaults {
  static constexpr int kMR = 4, kNR = 16, kKR = 4, kNP = 1, kActW = 8;
  using A = int8_t;
  static int64_t a_stride(int64_t k) { return round_up(k, kKR); }
  static int64_t rows(int64_t rem) { return rem < kMR ? rem : kMR; }
  static int w_at(int col, int kk) { return col * kKR + kk; }
  template <int M>
  static void tile(const int8_t* a, int64_t lda, int64_t ks, const int8_t* w, int64_t panel,
                   int np, int32_t* acc, int64_t ldacc) {
    for (int j = 0; j < np; ++j) {
      const int8_t* wj = w + j * panel;
      int32_t s[M][kNR] = {};
      for (int64_t st = 0; st < ks; ++st) {
        const int8_t* ws = wj + st * kNR * kKR;
        for (int r = 0; r < M; ++r) {
          const int8_t* ar = a + r * lda + st * kKR;
          for (int c = 0; c < kNR; ++c) {
            int32_t t = 0;
            for (int q = 0; q < kKR; ++q) t += int32_t(ar[q]) * int32_t(ws[c * kKR + q]);
            s[r][c] += t;
          }
        }
      }
      for (int r = 0; r < M; ++r)
        for (int c = 0; c < kNR; ++c) acc[r * ldacc + j * kNR + c] = s[r][c];
    }
  }
};

}  // namespace
}  // namespace cpukern::moe
