// Fairy2i phase quantisation of a real (2n, 2m) layer and its dense reconstruction.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/ternary_codes.h"
#include "kernels/widely_linear/ukernel.h"

namespace cpukern::widely_linear {
namespace {

std::string idx(int64_t r, int64_t c) {
  return "[" + std::to_string(r) + ", " + std::to_string(c) + "]";
}

using ternary_codes::words_for;

// Writes one ternary value into the public 2-bit format (row zeroed before).
inline void put(uint32_t* row, int64_t j, int v) {
  row[j >> 4] |= ternary_codes::encode(v, int(j & 15));
}

inline int code_at(const uint32_t* row, int64_t j) {
  return ternary_codes::decode(row[j >> 4], int(j & 15));
}

// One stage for one complex tensor (U or W), in place on the residual (re, im).
// Tie rule: |re| >= |im| (including 0 = 0) maps to the real axis; re >= 0 (also -0) -> +1,
// else -1; otherwise im > 0 -> +i, im < 0 -> -i.
void quantize_tensor(std::vector<double>& re, std::vector<double>& im, int64_t n, int64_t m,
                     uint32_t* plane_re, uint32_t* plane_im, float* s_re, float* s_im) {
  const int64_t words = words_for(m);
  const int64_t count = n * m;
  std::vector<int8_t> axis(count), sign(count);  // axis 0 = real, 1 = imaginary
  double sum_re = 0, sum_im = 0;
  int64_t cnt_re = 0, cnt_im = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (std::fabs(re[i]) >= std::fabs(im[i])) {
      axis[i] = 0;
      sign[i] = re[i] >= 0 ? 1 : -1;
      sum_re += std::fabs(re[i]);
      ++cnt_re;
    } else {
      axis[i] = 1;
      sign[i] = im[i] > 0 ? 1 : -1;
      sum_im += std::fabs(im[i]);
      ++cnt_im;
    }
  }
  const float sr = cnt_re ? float(sum_re / double(cnt_re)) : 0.0f;
  const float si = cnt_im ? float(sum_im / double(cnt_im)) : 0.0f;
  *s_re = sr;
  *s_im = si;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < m; ++c) {
      const int64_t i = r * m + c;
      if (axis[i] == 0) {
        put(plane_re + r * words, c, sign[i]);
        re[i] -= double(sr) * sign[i];
      } else {
        put(plane_im + r * words, c, sign[i]);
        im[i] -= double(si) * sign[i];
      }
    }
}

}  // namespace

void phase_quantize(const float* a, int64_t n, int64_t m, int64_t stages, uint32_t* planes,
                    float* scales) {
  check_arg(stages >= 1, "stages", "must be >= 1, got " + std::to_string(stages));
  check_arg(n >= 1, "a", "must have at least 2 rows (2n with n >= 1), got n = " + std::to_string(n));
  check_arg(m >= 1, "m", "must be >= 1 (a has 2m columns), got " + std::to_string(m));
  check_arg(a != nullptr, "a", "must not be null");
  check_arg(planes != nullptr, "planes", "must not be null");
  check_arg(scales != nullptr, "scales", "must not be null");
  const int64_t words = words_for(m);
  checked_mul(checked_mul(checked_mul(stages, 4, "planes"), n, "planes"), words * 16, "planes");
  checked_mul(4 * n, m, "a");
  check_disjoint(planes, stages * 4 * n * words * 4, "planes", {{a, 4 * n * m * 4, "a"}});
  check_disjoint(scales, stages * 4 * 4, "scales", {{a, 4 * n * m * 4, "a"}});
  for (int64_t r = 0; r < 2 * n; ++r)
    for (int64_t c = 0; c < 2 * m; ++c) {
      const float v = a[r * 2 * m + c];
      if (!std::isfinite(v))
        throw_arg("a", "must be finite, got " + std::to_string(v) + " at index " + idx(r, c));
    }
  const int64_t count = n * m;
  std::vector<double> ure(count), uim(count), wre(count), wim(count);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < m; ++c) {
      const double a11 = a[r * 2 * m + c], a12 = a[r * 2 * m + m + c];
      const double a21 = a[(n + r) * 2 * m + c], a22 = a[(n + r) * 2 * m + m + c];
      const int64_t i = r * m + c;
      ure[i] = (a11 + a22) / 2;
      uim[i] = (a21 - a12) / 2;
      wre[i] = (a11 - a22) / 2;
      wim[i] = (a12 + a21) / 2;
    }
  const int64_t plane_words = n * words;
  for (int64_t i = 0; i < stages * 4 * plane_words; ++i) planes[i] = 0;
  for (int64_t s = 0; s < stages; ++s) {
    uint32_t* p = planes + s * 4 * plane_words;
    float* sc = scales + s * 4;
    quantize_tensor(ure, uim, n, m, p + kUre * plane_words, p + kUim * plane_words, &sc[kUre],
                    &sc[kUim]);
    quantize_tensor(wre, wim, n, m, p + kWre * plane_words, p + kWim * plane_words, &sc[kWre],
                    &sc[kWim]);
  }
}

void check_plane_dims(int64_t stages, int64_t n, int64_t words, int64_t m) {
  check_arg(stages >= 1, "stages", "must be >= 1, got " + std::to_string(stages));
  check_arg(m >= 1 && m <= limits::kMaxElements, "m",
            "must be in [1, 2**46], got " + std::to_string(m));  // before ceil(m/16) can overflow
  check_arg(n >= 1, "planes", "must have n >= 1 rows, got " + std::to_string(n));
  check_arg(words == words_for(m), "planes",
            "expected ceil(m/16) = " + std::to_string(words_for(m)) + " words per row for m = " +
                std::to_string(m) + ", got " + std::to_string(words));
  checked_mul(checked_mul(checked_mul(stages, 4, "planes"), n, "planes"), words * 16, "planes");
}

// Shared with prepare(): shape and code checks of the public planes.
void validate_planes(const uint32_t* planes, int64_t stages, int64_t n, int64_t words,
                     int64_t m) {
  check_plane_dims(stages, n, words, m);
  check_arg(planes != nullptr, "planes", "must not be null");
  // Bits of codes past m in the last word must be zero.
  const uint32_t tail_mask = ternary_codes::past_mask(int((m - 1) % 16) + 1);
  const int64_t rows = stages * 4 * n;
  for (int64_t row = 0; row < rows; ++row) {
    const uint32_t* w = planes + row * words;
    for (int64_t j = 0; j < words; ++j) {
      const uint32_t bad = ternary_codes::invalid_codes(w[j]);
      if (bad) {
        const int lane = __builtin_ctz(bad) / 2;
        throw_arg("planes", "invalid code 0b11 at stage " + std::to_string(row / (4 * n)) +
                                ", plane " + std::to_string((row / n) % 4) + ", element " +
                                idx(row % n, j * 16 + lane));
      }
    }
    if (tail_mask && (w[words - 1] & tail_mask)) {
      const int lane = __builtin_ctz(w[words - 1] & tail_mask) / 2;
      throw_arg("planes", "nonzero code past m = " + std::to_string(m) + " at stage " +
                              std::to_string(row / (4 * n)) + ", plane " +
                              std::to_string((row / n) % 4) + ", element " +
                              idx(row % n, (words - 1) * 16 + lane));
    }
  }
}

void validate_scales(const float* scales, bool per_row, int64_t stages, int64_t n) {
  check_arg(scales != nullptr, "scales", "must not be null");
  const int64_t count = stages * 4 * (per_row ? n : 1);
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(scales[i]))
      throw_arg("scales", "must be finite, got " + std::to_string(scales[i]) + " at flat index " +
                              std::to_string(i));
}

void dense(const uint32_t* planes, const float* scales, bool scales_per_row, int64_t stages,
           int64_t n, int64_t words, int64_t m, float* a) {
  validate_planes(planes, stages, n, words, m);
  validate_scales(scales, scales_per_row, stages, n);
  check_arg(a != nullptr, "a", "must not be null");
  checked_mul(4 * n, m, "m");
  check_disjoint(a, 4 * n * m * 4, "out",
                 {{planes, stages * 4 * n * words * 4, "planes"},
                  {scales, stages * 4 * (scales_per_row ? n : 1) * 4, "scales"}});
  const int64_t plane_words = n * words;
  std::vector<double> acc(4 * n * m, 0.0);  // (2n, 2m)
  for (int64_t s = 0; s < stages; ++s)
    for (int64_t r = 0; r < n; ++r) {
      double sc[4];
      for (int p = 0; p < 4; ++p)
        sc[p] = scales_per_row ? scales[(s * 4 + p) * n + r] : scales[s * 4 + p];
      const uint32_t* base = planes + s * 4 * plane_words + r * words;
      for (int64_t c = 0; c < m; ++c) {
        const double ur = sc[kUre] * code_at(base + kUre * plane_words, c);
        const double ui = sc[kUim] * code_at(base + kUim * plane_words, c);
        const double wr = sc[kWre] * code_at(base + kWre * plane_words, c);
        const double wi = sc[kWim] * code_at(base + kWim * plane_words, c);
        acc[r * 2 * m + c] += wr + ur;             // A11
        acc[r * 2 * m + m + c] += wi - ui;         // A12
        acc[(n + r) * 2 * m + c] += wi + ui;       // A21
        acc[(n + r) * 2 * m + m + c] += ur - wr;   // A22
      }
    }
  for (int64_t i = 0; i < 4 * n * m; ++i) a[i] = float(acc[i]);
}

}  // namespace cpukern::widely_linear
