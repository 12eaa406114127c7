// The public packed format, written once for every variant.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/common/errors.h"
#include "kernels/ternary/ternary.h"

namespace cpukern::ternary {
namespace {

std::string index_str(int64_t r, int64_t c) {
  return "[" + std::to_string(r) + ", " + std::to_string(c) + "]";
}

void check_shape(int64_t m, int64_t k) {
  check_arg(m >= 0, "w", "rows must be >= 0, got " + std::to_string(m));
  check_arg(k >= 0, "k", "must be >= 0, got " + std::to_string(k));
  check_arg(k <= (int64_t(1) << 46), "k", "expected k <= 2**46, got " + std::to_string(k));
  checked_mul(m, words_for(k) * 16, "w");
}

}  // namespace

void pack(const int8_t* w, int64_t m, int64_t k, uint32_t* packed) {
  check_shape(m, k);
  check_disjoint(packed, m * words_for(k) * 4, "out", {{w, m * k, "w"}});
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int8_t v = w[r * k + j];
      if (v < -1 || v > 1)
        throw_arg("w", "values must be in {-1, 0, +1}, got " + std::to_string(v) + " at index " +
                           index_str(r, j));
    }
  const int64_t words = words_for(k);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t wi = 0; wi < words; ++wi) {
      uint32_t word = 0;
      for (int64_t s = 0; s < 16 && wi * 16 + s < k; ++s) {
        const int8_t v = w[r * k + wi * 16 + s];
        if (v == 1) word |= 2u << (2 * s);
        if (v == -1) word |= 1u << (2 * s);
      }
      packed[r * words + wi] = word;
    }
}

// The common case (no error) is one OR over each row.
int64_t first_bad_word(const uint32_t* p, int64_t m, int64_t words, int64_t k) {
  if (k == 0) return -1;
  const uint32_t past = ternary_codes::past_mask(int(k - (words - 1) * 16));
  auto bad = [&](uint32_t word, int64_t wi) {
    return ternary_codes::invalid_codes(word) != 0 || (wi == words - 1 && (word & past) != 0);
  };
  for (int64_t r = 0; r < m; ++r) {
    const uint32_t* row = p + r * words;
    uint32_t any = 0;
    for (int64_t wi = 0; wi < words; ++wi) any |= row[wi] & (row[wi] >> 1);
    if (!(any & 0x55555555u) && !(row[words - 1] & past)) continue;
    for (int64_t wi = 0; wi < words; ++wi)
      if (bad(row[wi], wi)) return r * words + wi;
  }
  return -1;
}

void throw_bad_word(int64_t index, uint32_t word, int64_t words, int64_t k) {
  auto s = [](int64_t v) { return std::to_string(v); };
  const int64_t r = index / words, wi = index % words;
  if (const uint32_t bad = ternary_codes::invalid_codes(word)) {
    const int c = __builtin_ctz(bad) / 2;
    throw_arg("packed", "invalid code 0b11 for weight [" + s(r) + ", " + s(wi * 16 + c) +
                            "] (word [" + s(r) + ", " + s(wi) + "])");
  }
  const int valid = int(std::min<int64_t>(16, k - wi * 16));
  const int c = __builtin_ctz(word & ternary_codes::past_mask(valid)) / 2;
  throw_arg("packed", "nonzero code past k = " + s(k) + " for column " + s(wi * 16 + c) +
                          " of row " + s(r) + " (word [" + s(r) + ", " + s(wi) + "])");
}

void unpack(const uint32_t* packed, int64_t m, int64_t words, int64_t k, int8_t* w) {
  check_shape(m, k);
  check_arg(words == words_for(k), "packed",
            "expected ceil(k/16) = " + std::to_string(words_for(k)) + " words per row for k = " +
                std::to_string(k) + ", got " + std::to_string(words));
  check_disjoint(w, m * k, "out", {{packed, m * words * 4, "packed"}});
  if (const int64_t i = first_bad_word(packed, m, words, k); i >= 0)  // prepare's rule
    throw_bad_word(i, packed[i], words, k);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const uint32_t code = (packed[r * words + j / 16] >> (2 * (j % 16))) & 3u;
      w[r * k + j] = int8_t(code == 2u ? 1 : code == 1u ? -1 : 0);
    }
}

void quantize(const float* w, int64_t m, int64_t k, bool per_tensor, uint32_t* packed,
              float* scale) {
  check_shape(m, k);
  check_arg(k > 0, "w", "must have at least one column");
  check_disjoint(packed, m * words_for(k) * 4, "packed", {{w, m * k * 4, "w"}});
  check_disjoint(scale, m * 4, "scale", {{w, m * k * 4, "w"}});
  for (int64_t i = 0; i < m * k; ++i)
    if (!std::isfinite(w[i]))
      throw_arg("w", "must be finite, got " + std::to_string(w[i]) + " at index " +
                         index_str(i / k, i % k));
  auto mean_abs = [&](int64_t r0, int64_t r1) {
    double s = 0;
    for (int64_t i = r0 * k; i < r1 * k; ++i) s += std::fabs(double(w[i]));
    return s / double((r1 - r0) * k);
  };
  const double tensor_scale = per_tensor && m > 0 ? mean_abs(0, m) : 0.0;
  const int64_t words = words_for(k);
  for (int64_t r = 0; r < m; ++r) {
    const double s = per_tensor ? tensor_scale : mean_abs(r, r + 1);
    scale[r] = float(s);
    for (int64_t wi = 0; wi < words; ++wi) {
      uint32_t word = 0;
      for (int64_t c = 0; c < 16 && wi * 16 + c < k; ++c) {
        // An all-zero row (s == 0) quantises to zeros.
        const double q = s > 0 ? std::nearbyint(double(w[r * k + wi * 16 + c]) / s) : 0.0;
        if (q >= 1) word |= 2u << (2 * c);
        if (q <= -1) word |= 1u << (2 * c);
      }
      packed[r * words + wi] = word;
    }
  }
}

Act parse_act(const std::string& act) {
  if (act == "fp32") return Act::kF32;
  if (act == "int8") return Act::kInt8;
  if (act == "int8_bitnet") return Act::kInt8BitNet;
  throw_arg("act", "expected one of 'fp32', 'int8', 'int8_bitnet', got '" + act + "'");
}

}  // namespace cpukern::ternary
