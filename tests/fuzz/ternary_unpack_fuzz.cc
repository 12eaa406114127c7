// libFuzzer target: the parsers of untrusted packed ternary bytes, cpukern::ternary::unpack and
// cpukern::ternary::prepare (then gemv on what prepare accepted), on arbitrary uint32 words and
// arbitrary shapes (k negative, huge, mismatched with the words per row).
//
// Checks, besides the sanitizers (ASan + UBSan):
//   * unpack / prepare accept exactly the inputs an independent validator accepts (no code
//     0b11 in the first k codes of a row, no nonzero code past k: one rule for both; words
//     per row == ceil(k/16); 0 <= k), and throw std::invalid_argument otherwise, before writing;
//   * unpack decodes exactly; gemv on small-integer activations is exact (bitwise equal to an
//     integer model times the scale) for every variant; int8 gemv agrees bitwise across variants.
//
// Input (little-endian): [0] mode, [1] rows, [2..9] k (int64), [10..11] words per row,
// [12] variant, [13] scale, then the packed words (cycled to fill the buffer) and activations.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/ternary_codes.h"
#include "kernels/ternary/ternary.h"

namespace {

using cpukern::ternary::Act;

struct Reader {
  const uint8_t* p;
  size_t n, i = 0;
  uint8_t u8() { return i < n ? p[i++] : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v |= uint64_t(u8()) << (8 * b);
    return v;
  }
  uint16_t u16() { return uint16_t(u8() | (u8() << 8)); }
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "ternary_unpack_fuzz: %s\n", what);
  std::abort();
}

// The raw 2-bit code (the validator below reads codes itself, independently of the library).
int code_at(const uint32_t* row, int64_t j) { return int((row[j / 16] >> (2 * (j % 16))) & 3u); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r{data, size};
  const uint8_t mode = r.u8();
  int64_t m = r.u8() % 33;
  int64_t k = int64_t(r.u64());
  int64_t words = r.u16();
  switch (mode % 4) {
    case 0:  // a valid shape
      k = (k % 700 + 700) % 700;
      words = (k + 15) / 16;
      break;
    case 1:  // small k, arbitrary words per row
      k = (k % 700 + 700) % 700;
      words %= 64;
      break;
    case 2:  // arbitrary 64-bit k (negative, huge, near overflow), arbitrary words
      break;
    default:  // extremes
      k = (mode & 0x10) ? INT64_MAX - int64_t(words % 16) : INT64_MIN + int64_t(words % 16);
      break;
  }
  const auto variants = cpukern::ternary::list_variants();
  std::vector<std::string> names;
  for (const auto& v : variants)
    if (v.supported) names.push_back(v.name);
  const std::string isa = names[r.u8() % names.size()];
  static const float kScales[] = {1.0f, 0.5f, -2.0f, 0.25f};
  const uint8_t sc = r.u8();
  const bool has_scale = sc & 4;

  // The caller's buffer always holds m * words words (the API cannot see buffer sizes); a
  // shape too large for this input's words keeps m = 0, which must still be validated.
  if (m * words > 4096) m = 0;
  std::vector<uint32_t> packed(size_t(m * words));
  const size_t body = r.i < size ? size - r.i : 0;
  for (size_t w = 0; w < packed.size(); ++w) {
    uint32_t v = 0;
    if (body)
      for (int b = 0; b < 4; ++b) v |= uint32_t(data[r.i + (w * 4 + b) % body]) << (8 * b);
    packed[w] = v;
  }

  // The independent validator.
  const bool shape_ok = k >= 0 && k <= (int64_t(1) << 46) && words == (k + 15) / 16;
  bool codes_ok = shape_ok, tail_ok = shape_ok;
  if (shape_ok)
    for (int64_t row = 0; row < m; ++row) {
      const uint32_t* p = packed.data() + row * words;
      for (int64_t j = 0; j < k; ++j) codes_ok &= code_at(p, j) != 3;
      for (int64_t j = k; j < words * 16; ++j) tail_ok &= code_at(p, j) == 0;
    }

  // unpack: out is only allocated when the shape is valid (m * k <= 32 * 65535 then);
  // otherwise unpack must throw before it writes anything.
  std::vector<int8_t> w(shape_ok ? size_t(m * k) : 0);
  bool unpacked = true;
  try {
    cpukern::ternary::unpack(packed.data(), m, words, k, shape_ok ? w.data() : nullptr);
  } catch (const std::invalid_argument&) {
    unpacked = false;
  }
  if (unpacked != (shape_ok && codes_ok && tail_ok))
    fail("unpack accepted/refused differently from the validator");
  if (unpacked)
    for (int64_t row = 0; row < m; ++row)
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t word = packed[size_t(row * words + j / 16)];
        if (w[size_t(row * k + j)] != cpukern::ternary_codes::decode(word, int(j % 16)))
          fail("unpack decoded wrongly");
      }

  // prepare on the chosen variant, then gemv.
  std::vector<float> scale(size_t(m), kScales[sc & 3]);
  std::shared_ptr<const cpukern::ternary::PreparedWeights> pw;
  try {
    pw = cpukern::ternary::prepare(packed.data(), m, words, k, has_scale ? scale.data() : nullptr, isa);
  } catch (const std::invalid_argument&) {
  }
  if (bool(pw) != (shape_ok && codes_ok && tail_ok))
    fail("prepare accepted/refused differently from the validator");
  if (!pw || k > 4096) return 0;

  const int64_t batch = 1 + (mode >> 6);
  std::vector<float> x(size_t(batch * k));
  for (size_t j = 0; j < x.size(); ++j)
    x[j] = float(int(body ? data[r.i + (j * 7 + 3) % body] % 9 : 1) - 4);  // small integers: exact
  std::vector<float> y(size_t(batch * m), NAN);
  const int threads = 1 + ((mode >> 2) & 1);
  cpukern::ternary::gemv(*pw, x.data(), batch, nullptr, 0, Act::kF32, threads, y.data());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t row = 0; row < m; ++row) {
      int64_t acc = 0;
      for (int64_t j = 0; j < k; ++j) acc += int64_t(w[size_t(row * k + j)]) * int64_t(x[size_t(b * k + j)]);
      const float want = float(acc) * (has_scale ? scale[size_t(row)] : 1.0f);
      if (std::memcmp(&want, &y[size_t(b * m + row)], 4) != 0 && !(want == 0 && y[size_t(b * m + row)] == 0))
        fail("fp32 gemv is not exact on small integers");
    }

  // int8: every variant agrees bitwise with the reference variant.
  std::vector<float> y8(size_t(batch * m)), y8_ref(size_t(batch * m));
  cpukern::ternary::gemv(*pw, x.data(), batch, nullptr, 0, Act::kInt8, threads, y8.data());
  auto ref = cpukern::ternary::prepare(packed.data(), m, words, k, has_scale ? scale.data() : nullptr,
                                       "reference");
  cpukern::ternary::gemv(*ref, x.data(), batch, nullptr, 0, Act::kInt8, 1, y8_ref.data());
  if (!y8.empty() && std::memcmp(y8.data(), y8_ref.data(), y8.size() * 4) != 0) fail("int8 gemv differs from the reference");
  return 0;
}
