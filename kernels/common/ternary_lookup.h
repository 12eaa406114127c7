// The lookup layouts of ternary weights, shared by every op that has them (ternary lut3r8,
// widely-linear g3r8x4 and g4r16x4): tiles of R rows, columns in groups of G; per group each
// row has a G-bit "+1" pattern and a G-bit "-1" pattern, which index a 2^G-entry table of the
// activations' subset sums (vpermps), so one lookup replaces G masked adds.
// A row's patterns are cut into fields of K groups (G * K columns, lane bits 0..G*K-1); a
// layout only chooses where a field's lanes go (Placement). This header packs and unpacks
// rows and builds a group's subset-sum table; the micro-kernels read the lanes.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__BMI2__)
#include <immintrin.h>
#endif

#include "kernels/common/ternary_codes.h"

namespace cpukern::ternary_lookup {

struct Geometry {
  int R, G, K;  // rows per tile, columns per group, groups per field
  constexpr int cols() const { return G * K; }
};
inline constexpr Geometry kLut3r8{8, 3, 10};  // ternary: "+1" and "-1" fields in two lanes
inline constexpr Geometry kG3r8{8, 3, 5};     // widely-linear AVX2: both fields in one lane
inline constexpr Geometry kG4r16{16, 4, 4};   // widely-linear AVX-512F: both in one lane

// Where field c of a row goes: its "+1" bits at lanes[c * stride], its "-1" bits at
// lanes[c * stride + neg_lane] shifted left by neg_shift (OR'ed into the "+1" lane when
// neg_lane is 0).
struct Placement {
  int64_t stride, neg_lane;
  int neg_shift;
};

// The 16-bit "+1" / "-1" masks of one public word (bit j = weight j).
struct SplitPortable {  // AMD Zen 1/2 run pext in microcode
  static uint32_t pos(uint32_t w) { return ternary_codes::add_mask(w); }
  static uint32_t neg(uint32_t w) { return ternary_codes::sub_mask(w); }
};
#if defined(__BMI2__)
struct SplitPext {
  static uint32_t pos(uint32_t w) { return _pext_u32(w, 0xAAAAAAAAu); }
  static uint32_t neg(uint32_t w) { return _pext_u32(w, 0x55555555u); }
};
#endif

// Scratch of pack_row, reused across rows: a row's "+1" and "-1" masks (16 bits per public
// word), computed in one pass over the row (vectorised for SplitPortable), then cut into
// fields with one unaligned 8-byte read each.
class RowMasks {
 public:
  explicit RowMasks(int64_t words) : pos_(size_t(words) + kPad), neg_(size_t(words) + kPad) {}
  template <class Split>
  void load(const uint32_t* row, int64_t words) {
    uint16_t *pos = pos_.data(), *neg = neg_.data();
    for (int64_t i = 0; i < words; ++i) {
      pos[i] = uint16_t(Split::pos(row[i]));
      neg[i] = uint16_t(Split::neg(row[i]));
    }
  }
  uint64_t pos(int64_t bit) const { return bits_at(pos_.data(), bit); }
  uint64_t neg(int64_t bit) const { return bits_at(neg_.data(), bit); }

 private:
  static constexpr size_t kPad = 8;  // zero masks past the row: a read at any field's bit
  static uint64_t bits_at(const uint16_t* s, int64_t bit) {
    uint64_t v;
    std::memcpy(&v, reinterpret_cast<const unsigned char*>(s) + (bit >> 3), 8);
    return v >> (bit & 7);
  }
  std::vector<uint16_t> pos_, neg_;
};

// Writes `fields` fields of one row of `words` public words (row null: a padding row, all
// zero): the row's "+1" and "-1" bit streams cut into fields of g.cols() bits; fields past
// the row's columns are zero. masks: scratch for at least `words` words.
template <class Split>
void pack_row(const Geometry& g, const Placement& p, const uint32_t* row, int64_t words,
              int64_t fields, RowMasks& masks, uint32_t* lanes) {
  const int cols = g.cols();
  const uint64_t mask = (uint64_t(1) << cols) - 1;
  const auto put = [&](int64_t c, uint64_t pos, uint64_t neg) {
    uint32_t* lane = lanes + c * p.stride;
    if (p.neg_lane == 0) {
      *lane = uint32_t(pos & mask) | uint32_t(neg & mask) << p.neg_shift;
    } else {
      lane[0] = uint32_t(pos & mask);
      lane[p.neg_lane] = uint32_t(neg & mask) << p.neg_shift;
    }
  };
  if (!row) {
    for (int64_t c = 0; c < fields; ++c) put(c, 0, 0);
    return;
  }
  masks.load<Split>(row, words);
  for (int64_t c = 0; c < fields; ++c) put(c, masks.pos(c * cols), masks.neg(c * cols));
}

// Public words from 16 "+1" bits and 16 "-1" bits, portable: two table lookups per byte
// instead of the 10-op bit spread.
struct SpreadTable {
  uint16_t even[256] = {};  // bit j -> bit 2j
  constexpr SpreadTable() {
    for (uint32_t b = 0; b < 256; ++b) even[b] = uint16_t(ternary_codes::spread_to_even_bits(b));
  }
};
inline constexpr SpreadTable kSpread{};

struct JoinPortable {
  static uint32_t word(uint32_t pos, uint32_t neg) {
    const uint32_t even = uint32_t(kSpread.even[neg & 255]) | uint32_t(kSpread.even[(neg >> 8) & 255]) << 16;
    const uint32_t odd = uint32_t(kSpread.even[pos & 255]) | uint32_t(kSpread.even[(pos >> 8) & 255]) << 16;
    return odd << 1 | even;
  }
};
#if defined(__BMI2__)
struct JoinPdep {
  static uint32_t word(uint32_t pos, uint32_t neg) {
    return _pdep_u32(pos, 0xAAAAAAAAu) | _pdep_u32(neg, 0x55555555u);
  }
};
#endif

// The 2^g subset sums of g activations: T[s] = the sum of x[i] over the bits i of s, added in
// column order (a one-term sum is that term: -0.0 stays -0.0; T[0] = +0.0). Adds only.
inline void subset_sums(const float* x, int g, float* T) {
  T[0] = 0.0f;
  for (int i = 0; i < g; ++i) {
    const int h = 1 << i;
    T[h] = x[i];
    for (int s = 1; s < h; ++s) T[h + s] = T[s] + x[i];
  }
}

// The inverse of pack_row: `words` public words of a row from its `fields` fields (columns
// past the last field's: zero).
template <class Join>
void unpack_row(const Geometry& g, const Placement& p, const uint32_t* lanes, int64_t fields,
                uint32_t* row, int64_t words) {
  const int cols = g.cols();
  const uint32_t mask = (uint32_t(1) << cols) - 1u;
  uint64_t pos = 0, neg = 0;  // pending bits, `bits` of them (< 16 between fields)
  int bits = 0;
  int64_t w = 0;
  for (int64_t c = 0; c < fields; ++c) {
    const uint32_t* lane = lanes + c * p.stride;
    pos |= uint64_t(lane[0] & mask) << bits;
    neg |= uint64_t((lane[p.neg_lane] >> p.neg_shift) & mask) << bits;
    for (bits += cols; bits >= 16 && w < words; bits -= 16, pos >>= 16, neg >>= 16)
      row[w++] = Join::word(uint32_t(pos) & 0xFFFFu, uint32_t(neg) & 0xFFFFu);
  }
  for (; w < words; ++w, pos >>= 16, neg >>= 16)
    row[w] = Join::word(uint32_t(pos) & 0xFFFFu, uint32_t(neg) & 0xFFFFu);
}

}  // namespace cpukern::ternary_lookup
