// Geometry of the weight layouts (ukernel.h lists them), shared by each layout's micro-kernels
// and packers.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/common/ternary_codes.h"
#include "kernels/common/ternary_lookup.h"

namespace cpukern::ternary::layouts {

// lut3r8 (kernels/common/ternary_lookup.h kLut3r8): 8-row tiles; per block of 30 columns 16
// uint32 (8 add lanes, then 8 subtract lanes); bit c of a lane = column c of the block
// (group c/3, bit c%3 of its pattern).
inline constexpr int64_t kLut3r8Rows = ternary_lookup::kLut3r8.R;
inline constexpr int64_t kLut3r8Cols = ternary_lookup::kLut3r8.cols();
inline constexpr int64_t lut3r8_blocks(int64_t k) { return (k + kLut3r8Cols - 1) / kLut3r8Cols; }

// lut27r16: 16-row tiles; per block of 18 columns 16 uint32 lanes of six 5-bit codes
// (w0 + 1) + 3 (w1 + 1) + 9 (w2 + 1), one per group of 3 columns; 13 = three zeros.
inline constexpr int64_t kLut27r16Rows = 16;
inline constexpr int64_t kLut27r16Cols = 18;
inline constexpr int64_t lut27r16_blocks(int64_t k) {
  return (k + kLut27r16Cols - 1) / kLut27r16Cols;
}

// lut4r16: 16-row tiles; per group of 4 columns 16 bytes, byte i = row i of the tile:
// bits 0-3 its "add" pattern (bit c: column 4g + c is +1), bits 4-7 its "subtract" pattern
// (-1). 2 bits per weight; the NEON kernel looks both nibbles up in a 16-entry table.
inline constexpr int64_t kLut4r16Rows = 16;
inline constexpr int64_t kLut4r16Cols = 4;
inline constexpr int64_t lut4r16_groups(int64_t k) { return (k + kLut4r16Cols - 1) / kLut4r16Cols; }

// t2p16r16: the public words of 16-row tiles, word w of rows 0..15 adjacent.
inline constexpr int64_t kT2p16r16Rows = 16;

// q2b<C>: per row, per block of C columns C/4 bytes; byte i holds (w + 1) of columns
// i + q C/4 in bits 2q, 2q+1 (q = 0..3).
inline constexpr int64_t q2b_row_bytes(int64_t k, int64_t cols) {
  return (k + cols - 1) / cols * (cols / 4);
}
// q2b<C>r4: the same blocks, each 4 rows interleaved block by block: rows 4g..4g+3 fill the
// 4 rb bytes at 4g rb as [block][row][C/4 bytes], so a 4-row tile reads one sequential stream
// (q2b<C>: 4 streams rb bytes apart, too short for the hardware prefetcher at BitNet's K).
// The last m % 4 rows stay row-major (as q2b<C>). Byte offset of row r's block at byte bo of
// the row (bo a multiple of vb = C/4) in a layout of m rows, g = 1 (q2b<C>) or 4 (q2b<C>r4).
inline constexpr int64_t q2b_block_at(int64_t r, int64_t m, int64_t rb, int64_t bo, int64_t vb,
                                      int64_t g) {
  return r < m / g * g ? (r - r % g) * rb + bo * g + (r % g) * vb : r * rb + bo;
}

// b3p5c<C> (C = 160 or 320): per row, per block of C columns C/5 bytes, 5 trits t = w + 1 per
// byte (1.6 bits/weight); byte i holds the columns i + d C/5 (d = 0..4) as
// v = sum_d t_d 3^(4-d), stored as ceil(v 256 / 243) ^ 0x80. Digit d is then
// floor(3 b_d / 256) with b_d = 3^d b mod 256 (b = byte ^ 0x80), exact for v <= 242; the
// 0x80 bias makes the thresholds signed-byte compares and survives the *3 (3^d odd).
// Columns past k (to the block's end) get w = 0.
// The fp32 path keeps its own layout: b3p5 can be decoded without multiplies (the *3 is two
// adds, the digits two compares), but that yields one mask per weight, i.e. one masked fp32
// add per weight and lane (the pext kernel's cost), while the fp32 lookup kernels need the
// trits of 3 adjacent columns of one row per lane (lut3r8, lut27r16's 27-entry codes); a byte
// of 5 trits would need a 243-entry table per 5 activations, too large for register lookups.
inline constexpr int64_t b3p5_row_bytes(int64_t k, int64_t cols) {
  return (k + cols - 1) / cols * (cols / 5);
}

// Bytes of each layout for (m, k), by layout word, whatever micro-kernels this build has (an
// imported buffer prepared on another CPU is sized with these before it is unpacked; the
// tests check them against every micro-kernel's packed_size). Null for an unknown word.
using SizeFn = int64_t (*)(int64_t m, int64_t k);
inline int64_t t2p16_size(int64_t m, int64_t k) { return m * ternary_codes::words_for(k) * 4; }
inline int64_t t2p16r16_size(int64_t m, int64_t k) {
  return (m + kT2p16r16Rows - 1) / kT2p16r16Rows * ternary_codes::words_for(k) * 64;
}
inline int64_t lut3r8_size(int64_t m, int64_t k) { return (m + kLut3r8Rows - 1) / kLut3r8Rows * lut3r8_blocks(k) * 64; }
inline int64_t lut27r16_size(int64_t m, int64_t k) {
  return (m + kLut27r16Rows - 1) / kLut27r16Rows * lut27r16_blocks(k) * 64;
}
inline int64_t lut4r16_size(int64_t m, int64_t k) {
  return (m + kLut4r16Rows - 1) / kLut4r16Rows * lut4r16_groups(k) * kLut4r16Rows;
}
inline int64_t q2b128_size(int64_t m, int64_t k) { return m * q2b_row_bytes(k, 128); }
inline int64_t q2b256_size(int64_t m, int64_t k) { return m * q2b_row_bytes(k, 256); }
inline int64_t q2b128r4_size(int64_t m, int64_t k) { return q2b128_size(m, k); }
inline int64_t q2b256r4_size(int64_t m, int64_t k) { return q2b256_size(m, k); }
inline int64_t b3p5c160_size(int64_t m, int64_t k) { return m * b3p5_row_bytes(k, 160); }
inline int64_t b3p5c320_size(int64_t m, int64_t k) { return m * b3p5_row_bytes(k, 320); }
inline SizeFn size_fn(const char* layout) {
  struct Row {
    const char* name;
    SizeFn fn;
  };
  static constexpr Row kRows[] = {{"t2p16", t2p16_size},     {"t2p16r16", t2p16r16_size},
                                  {"lut3r8", lut3r8_size},   {"lut27r16", lut27r16_size},
                                  {"lut4r16", lut4r16_size}, {"q2b128", q2b128_size},
                                  {"q2b256", q2b256_size},   {"q2b128r4", q2b128r4_size},
                                  {"q2b256r4", q2b256r4_size}, {"b3p5c160", b3p5c160_size},
                                  {"b3p5c320", b3p5c320_size}};
  for (const Row& r : kRows)
    if (std::strcmp(r.name, layout) == 0) return r.fn;
  return nullptr;
}

}  // namespace cpukern::ternary::layouts
