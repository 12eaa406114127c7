// The lut3r8 packer body (the lookup layout family of kernels/common/ternary_lookup.h with
// 30-column fields, "+1" and "-1" fields in separate lanes), shared by its packer files,
// which differ only in how they split public words into masks and join them back
// (portable shifts and tables, or BMI2 pext / pdep).
#pragma once
#include "kernels/common/ternary_lookup.h"
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary::lut3r8 {

constexpr ternary_lookup::Geometry kGeo = ternary_lookup::kLut3r8;
// Per block of a tile: 8 "+1" lanes, then 8 "-1" lanes.
constexpr ternary_lookup::Placement kPlace{2 * kGeo.R, kGeo.R, 0};

// Writes every byte of the layout for rows [0, m) (padding lanes and rows are zero).
template <class Split>
void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  const int64_t words = words_for(k), nblk = layouts::lut3r8_blocks(k);
  uint32_t* out = static_cast<uint32_t*>(dst);
  const int64_t rows = (m + kGeo.R - 1) / kGeo.R * kGeo.R;
  ternary_lookup::RowMasks masks(words);
  for (int64_t r = 0; r < rows; ++r)
    ternary_lookup::pack_row<Split>(kGeo, kPlace, r < m ? packed + r * words : nullptr, words,
                                    nblk, masks,
                                    out + (r / kGeo.R) * nblk * kPlace.stride + r % kGeo.R);
}

template <class Join>
void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  const int64_t words = words_for(k), nblk = layouts::lut3r8_blocks(k);
  const uint32_t* in = static_cast<const uint32_t*>(src);
  for (int64_t r = 0; r < m; ++r)
    ternary_lookup::unpack_row<Join>(kGeo, kPlace,
                                     in + (r / kGeo.R) * nblk * kPlace.stride + r % kGeo.R,
                                     nblk, packed + r * words, words);
}

}  // namespace cpukern::ternary::lut3r8
