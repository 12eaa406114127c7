// The public 2-bit ternary weight format, shared by every ternary op: 16 weights per uint32,
// weight j of a word in bits 2j+1 (+1) and 2j (-1); 0b00 is 0 and 0b11 is invalid.
#pragma once
#include <cstdint>

namespace cpukern::ternary_codes {

// Words per row of k weights.
inline constexpr int64_t words_for(int64_t k) { return (k + 15) / 16; }

// The code of one weight in {-1, 0, +1}, at its place j (0..15) in a word.
inline constexpr uint32_t encode(int w, int j) {
  return w > 0 ? 2u << (2 * j) : w < 0 ? 1u << (2 * j) : 0u;
}
// The weight at place j of a word (0b11 decodes as 0: validate first).
inline constexpr int decode(uint32_t word, int j) {
  const uint32_t c = (word >> (2 * j)) & 3u;
  return c == 2 ? 1 : c == 1 ? -1 : 0;
}

// Bit 2j set where weight j holds the invalid code 0b11.
inline constexpr uint32_t invalid_codes(uint32_t word) { return word & (word >> 1) & 0x55555555u; }
// Bits 2j set where weight j lies past `valid` weights of the word (codes there must be 0).
inline constexpr uint32_t past_mask(int valid) {
  return valid >= 16 ? 0u : ~((uint32_t(1) << (2 * valid)) - 1u);
}

// Portable pext(word, 0xAAAAAAAA) / pext(word, 0x55555555): bit j = weight j is +1 / -1.
// Shifts, ands and ors only (no multiply: fp32 kernels use these in their hot loops).
inline constexpr uint32_t compress_even_bits(uint32_t v) {
  v &= 0x55555555u;
  v = (v | (v >> 1)) & 0x33333333u;
  v = (v | (v >> 2)) & 0x0F0F0F0Fu;
  v = (v | (v >> 4)) & 0x00FF00FFu;
  v = (v | (v >> 8)) & 0x0000FFFFu;
  return v;
}
// Spreads the 16 low bits of v to the even bits of a word (the inverse of
// compress_even_bits).
inline constexpr uint32_t spread_to_even_bits(uint32_t v) {
  v &= 0xFFFFu;
  v = (v | (v << 8)) & 0x00FF00FFu;
  v = (v | (v << 4)) & 0x0F0F0F0Fu;
  v = (v | (v << 2)) & 0x33333333u;
  v = (v | (v << 1)) & 0x55555555u;
  return v;
}

inline constexpr uint32_t add_mask(uint32_t word) { return compress_even_bits(word >> 1); }
inline constexpr uint32_t sub_mask(uint32_t word) { return compress_even_bits(word); }

}  // namespace cpukern::ternary_codes
