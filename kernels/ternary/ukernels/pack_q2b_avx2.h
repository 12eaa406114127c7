// The q2b<C> and q2b<C>r4 packer body with AVX2 (layouts.h), shared by their AVX2 packer
// files; it writes the same bytes as the portable body (pack_q2b.h).
// 32 layout bytes at a time: layout dword d of a block holds the 4 columns of public byte d
// of each quarter (quarters are C/16 public bytes apart). Whole-vector loads, one vpermd
// (and for q2b256 an unpack) and one vpshufb gather the four quarters' byte d into dword d, codes become (w + 1) with 4 logic ops, and two delta
// swaps transpose each dword's 4x4 matrix of 2-bit fields (quarter q, column c: bits 8q + 2c)
// into the layout's order (byte c, bits 2q).
#pragma once
#include <immintrin.h>

#include <cstring>

#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/pack_rows.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary::q2b_avx2 {

// Layout bytes 4d..4d+31 of a block from v: lane 0 = public bytes d..d+3 of quarters 0..3
// (a dword each), lane 1 = bytes d+4..d+7.
inline __m256i pack32(__m256i v) {
  const __m256i transpose_bytes = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7,
                                                   11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10,
                                                   14, 3, 7, 11, 15);
  v = _mm256_shuffle_epi8(v, transpose_bytes);  // dword j, byte q = quarter q's byte d + j
  // Codes -> w + 1: 00 -> 01, 01 (-1) -> 00, 10 (+1) -> 10.
  const __m256i low_bits = _mm256_set1_epi8(0x55);
  const __m256i nonzero = _mm256_and_si256(_mm256_or_si256(v, _mm256_srli_epi16(v, 1)), low_bits);
  v = _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi8(char(0xAA))),
                      _mm256_andnot_si256(nonzero, low_bits));
  // Transpose the 2-bit 4x4 matrix of each dword: 2x2 blocks, then the off-diagonal blocks.
  __m256i t = _mm256_and_si256(_mm256_xor_si256(v, _mm256_srli_epi32(v, 6)),
                               _mm256_set1_epi32(0x00CC00CC));
  v = _mm256_xor_si256(v, _mm256_xor_si256(t, _mm256_slli_epi32(t, 6)));
  t = _mm256_and_si256(_mm256_xor_si256(v, _mm256_srli_epi32(v, 12)),
                       _mm256_set1_epi32(0x0000F0F0));
  return _mm256_xor_si256(v, _mm256_xor_si256(t, _mm256_slli_epi32(t, 12)));
}

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store256(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// One block: kQ public bytes per quarter (8: 128 columns, 16: 256 columns), whole-vector
// loads only.
template <int64_t kQ>
inline void pack_block(const uint8_t* s, uint8_t* o) {
  if constexpr (kQ == 8) {  // quarters' dwords lo, hi in order
    store256(o, pack32(_mm256_permutevar8x32_epi32(load256(s), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7))));
  } else {
    static_assert(kQ == 16, "q2b128 or q2b256");
    const __m256i a = load256(s), b = load256(s + 32);  // quarters 0, 1 | 2, 3
    const __m256i order = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
    store256(o, pack32(_mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(a, b), order)));
    store256(o + 32, pack32(_mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(a, b), order)));
  }
}

template <int64_t kCols, int64_t kG = 1>
void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  constexpr int64_t kVB = kCols / 4;  // bytes per block, public and packed
  constexpr int64_t kQ = kVB / 4;     // public bytes per quarter
  const int64_t words = words_for(k), rb = layouts::q2b_row_bytes(k, kCols);
  uint8_t* out = static_cast<uint8_t*>(dst);
  pack_rows::RowBuffer row(words * 4, rb);  // zeros past the row: code 00 -> w + 1 = 1
  for (int64_t r = 0; r < m; ++r) {
    const uint8_t* s = row.load(packed + r * words);
    for (int64_t blk = 0; blk < rb; blk += kVB)
      pack_block<kQ>(s + blk, out + layouts::q2b_block_at(r, m, rb, blk, kVB, kG));
  }
}

}  // namespace cpukern::ternary::q2b_avx2
