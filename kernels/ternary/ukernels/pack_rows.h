// Helpers shared by the packers. A packer reads the public words one row at a time from a
// zero-padded copy of the row, as a little-endian stream of 2-bit codes (byte b of the row =
// columns 4b..4b+3), so that every layout's blocks are fixed-width fields of that stream:
// reads a few bytes past the row's end stay in bounds and see zeros (weight 0), which is
// what codes past k are (prepare validates that).
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the packers read public words as bytes (byte b = columns 4b..4b+3)");

// For table-lookup loops: GCC's vectorizer turns their lookups into element-by-element
// inserts, measured 1.7x slower than the scalar loop (q2b128 portable packer, Zen 3).
#if defined(__GNUC__) && !defined(__clang__)
#define CPUKERN_SCALAR_LOOKUPS __attribute__((optimize("no-tree-vectorize")))
#else
#define CPUKERN_SCALAR_LOOKUPS
#endif

namespace cpukern::ternary::pack_rows {

// Zero-padded bytes past a row copy, enough for one 8-byte read at any byte of the row.
inline constexpr int64_t kPadBytes = 16;

// A reusable row buffer: load() copies `bytes` bytes of a row; the rest up to `size` bytes
// plus kPadBytes stays zero.
class RowBuffer {
 public:
  explicit RowBuffer(int64_t bytes, int64_t size = 0)
      : bytes_(bytes), buf_(size_t((bytes > size ? bytes : size) + kPadBytes + 7) / 8, 0) {}
  uint8_t* data() { return reinterpret_cast<uint8_t*>(buf_.data()); }
  // Copies `bytes` bytes of `row` (the padding stays zero).
  const uint8_t* load(const void* row) {
    std::memcpy(buf_.data(), row, size_t(bytes_));
    return data();
  }
  void clear() { std::memset(buf_.data(), 0, buf_.size() * 8); }

 private:
  int64_t bytes_;
  std::vector<uint64_t> buf_;  // 8-byte aligned
};

// 64 bits of a little-endian bit stream from bit `bit` on (the top bit % 8 bits are zero).
inline uint64_t bits_at(const void* s, int64_t bit) {
  uint64_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(s) + (bit >> 3), 8);
  return v >> (bit & 7);
}

// ORs `v` (< 2**56) into the stream at bit `bit`.
inline void or_bits_at(void* s, int64_t bit, uint64_t v) {
  uint8_t* p = static_cast<uint8_t*>(s) + (bit >> 3);
  uint64_t t;
  std::memcpy(&t, p, 8);
  t |= v << (bit & 7);
  std::memcpy(p, &t, 8);
}

// Tiles of R rows with n lanes per row, lane e of row r at
// out[(r / R) * n * R + e * R + r % R]: row(r, lanes) writes the lanes of each row r < m; the
// rows after m up to the tile boundary get `pad` in every lane.
template <class T, class Row>
void tile_rows(int64_t m, int64_t n, int64_t R, T* out, T pad, Row row) {
  const int64_t rows = (m + R - 1) / R * R;
  for (int64_t r = 0; r < rows; ++r) {
    T* lanes = out + (r / R) * n * R + r % R;
    if (r < m) {
      row(r, lanes);
    } else {
      for (int64_t e = 0; e < n; ++e) lanes[e * R] = pad;
    }
  }
}

}  // namespace cpukern::ternary::pack_rows
