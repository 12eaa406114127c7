// The widely-linear lookup layouts g3r8x4 and g4r16x4: the lookup layout family of
// kernels/common/ternary_lookup.h (kG3r8, kG4r16) over the four planes of each stage;
// sizes, locate and tables: layouts.cc.
//
// A field (one uint32 lane) holds K groups of a row: bits G*g .. G*g+G-1 = "+1" pattern of
// group g, the same bits above neg_shift = its "-1" pattern.
//   g3r8x4  (AVX2):    R = 8,  G = 3, K = 5 groups per chunk, "-1" patterns at bit 15.
//   g4r16x4 (AVX-512): R = 16, G = 4, K = 4 groups per chunk, "-1" patterns at bit 16.
// Layout: uint32 lanes [stage][tile of R rows][chunk of K groups][plane][R rows]. Rows past
// n and columns past m are zero.
// Table, per batch row: [group][T_re, T_im, T_nim][2^G] floats, T[s] = sum of x over the
// columns in subset s, added in column order; T_nim = -T_im (O3: the sign of d1 and d7 is
// which table they read).
#pragma once
#include <cstdint>

#include "kernels/common/ternary_lookup.h"
#include "kernels/widely_linear/ukernel.h"

namespace cpukern::widely_linear::lookup {

struct Geometry : ternary_lookup::Geometry {
  int neg_shift;
  int64_t tiles(const Dims& d) const { return (d.n + R - 1) / R; }
  int64_t chunks(const Dims& d) const { return ((d.m + G - 1) / G + K - 1) / K; }
};
inline constexpr Geometry kG3R8{ternary_lookup::kG3r8, 15}, kG4R16{ternary_lookup::kG4r16, 16};

// Public planes -> lanes (out zeroed or not: every lane is written).
template <class Split>
void pack_lanes(const Geometry& q, const uint32_t* planes, const Dims& d, void* out) {
  uint32_t* o = static_cast<uint32_t*>(out);
  const int64_t T = q.tiles(d), C = q.chunks(d);
  const ternary_lookup::Placement place{4 * q.R, 0, q.neg_shift};
  ternary_lookup::RowMasks masks(d.words);
  for (int64_t s = 0; s < d.stages; ++s)
    for (int p = 0; p < 4; ++p)
      for (int64_t r = 0; r < d.n; ++r)
        ternary_lookup::pack_row<Split>(q, place, planes + ((s * 4 + p) * d.n + r) * d.words,
                                        d.words, C, masks,
                                        o + ((s * T + r / q.R) * C * 4 + p) * q.R + r % q.R);
}

}  // namespace cpukern::widely_linear::lookup
