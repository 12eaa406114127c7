// The lookup kernel layouts (g3r8x4, g4r16x4): geometry and the packing loop, shared by
// the portable packers and the pext packer (widely_linear_pack_*.cc; sizes, locate and
// tables: layouts.cc).
//
// Lanes = R rows; columns in groups of G; per group a 2^G-entry table of the subset sums of
// its G activations, looked up by each row's G-bit "+1" pattern and G-bit "-1" pattern
// (vpermps), so one lookup replaces G masked adds.
//   g3r8x4  (AVX2):    R = 8,  G = 3, K = 5 groups per chunk, "-1" patterns at bit 15.
//   g4r16x4 (AVX-512): R = 16, G = 4, K = 4 groups per chunk, "-1" patterns at bit 16.
// Layout: uint32 lanes [stage][tile of R rows][chunk of K groups][plane][R rows]; lane bits
// G*g .. G*g+G-1 = "+1" pattern of group g of the chunk, the same bits above the "-1" shift
// = its "-1" pattern. Rows past n and columns past m are zero.
// Table, per batch row: [group][T_re, T_im, T_nim][2^G] floats, T[s] = sum of x over the
// columns in subset s, added in column order; T_nim = -T_im (O3: the sign of d1 and d7 is
// which table they read).
#pragma once
#include <cstdint>

#include "kernels/common/ternary_codes.h"
#include "kernels/widely_linear/ukernel.h"

namespace cpukern::widely_linear::lookup {

struct Geometry {
  int R, G, K, neg_shift;
  int64_t tiles(const Dims& d) const { return (d.n + R - 1) / R; }
  int64_t chunks(const Dims& d) const { return ((d.m + G - 1) / G + K - 1) / K; }
};
inline constexpr Geometry kG3R8{8, 3, 5, 15}, kG4R16{16, 4, 4, 16};

// The 16-bit "+1" and "-1" masks of one public word, without BMI2 (AMD Zen 1/2 microcode
// pext).
struct SplitPortable {
  static uint32_t pos(uint32_t w) { return ternary_codes::add_mask(w); }
  static uint32_t neg(uint32_t w) { return ternary_codes::sub_mask(w); }
};

// Public planes -> lanes. Per (stage, plane, row) the row's "+1" and "-1" bit streams are
// cut into chunks of G*K columns (16-bit masks per word from Split).
template <class Split>
void pack_lanes(const Geometry& q, const uint32_t* planes, const Dims& d, void* out) {
  uint32_t* o = static_cast<uint32_t*>(out);
  const int64_t T = q.tiles(d), C = q.chunks(d);
  const int cols = q.G * q.K;
  const uint64_t cmask = (uint64_t(1) << cols) - 1;
  for (int64_t s = 0; s < d.stages; ++s)
    for (int p = 0; p < 4; ++p) {
      const uint32_t* src = planes + (s * 4 + p) * d.n * d.words;
      for (int64_t r = 0; r < d.n; ++r, src += d.words) {
        uint32_t* lane = o + ((s * T + r / q.R) * C * 4 + p) * q.R + r % q.R;
        uint64_t bp = 0, bn = 0;
        int bits = 0;
        int64_t c = 0;
        for (int64_t j = 0; j < d.words && c < C; ++j) {
          const uint32_t w = src[j];
          bp |= uint64_t(Split::pos(w)) << bits;
          bn |= uint64_t(Split::neg(w)) << bits;
          bits += 16;
          for (; bits >= cols && c < C; ++c, lane += 4 * q.R, bits -= cols, bp >>= cols,
                                         bn >>= cols)
            *lane = uint32_t(bp & cmask) | uint32_t(bn & cmask) << q.neg_shift;
        }
        if (bits > 0 && c < C) *lane = uint32_t(bp & cmask) | uint32_t(bn & cmask) << q.neg_shift;
      }
    }
}

}  // namespace cpukern::widely_linear::lookup
