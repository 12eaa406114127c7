// Table-driven tests of every ternary GEMV variant (and packer) of the kernel list against a
// float64 reference. Built twice: natively over the registry (ternary_test), and with
// CPUKERN_TEST_SIMDE over the SIMDe rows of the AVX-512 micro-kernels (ternary_simde_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/common/cpu_features.h"
#include "kernels/common/errors.h"
#include "kernels/common/isa.h"
#include "kernels/ternary/ternary.h"
#include "kernels/ternary/ukernel.h"
#include "tests/cc/common/variant_params.h"
#include "tests/cc/ternary/list_rows.h"

namespace cpukern::ternary {
namespace {

enum class Fill { kZeroRows, kAllPlus, kAllMinus, kRandom };
const char* fill_name(Fill f) {
  switch (f) {
    case Fill::kZeroRows: return "zero_rows";
    case Fill::kAllPlus: return "all_plus";
    case Fill::kAllMinus: return "all_minus";
    default: return "random";
  }
}

std::vector<int8_t> make_weights(int64_t m, int64_t k, Fill f, std::mt19937& rng) {
  std::vector<int8_t> w(static_cast<size_t>(m * k));
  std::uniform_int_distribution<int> d(-1, 1);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < k; ++j) {
      int8_t v = 0;
      switch (f) {
        case Fill::kZeroRows: v = (r % 3 == 1) ? 0 : int8_t(d(rng)); break;
        case Fill::kAllPlus: v = 1; break;
        case Fill::kAllMinus: v = -1; break;
        case Fill::kRandom: v = int8_t(d(rng)); break;
      }
      w[size_t(r * k + j)] = v;
    }
  return w;
}

std::vector<uint32_t> pack_weights(const std::vector<int8_t>& w, int64_t m, int64_t k) {
  std::vector<uint32_t> p(size_t(m * words_for(k)) + 1);
  pack(w.data(), m, k, p.data());
  return p;
}

struct Ref {
  std::vector<double> y, abs_sum;  // sum s w x, sum |s w x|
  std::vector<double> nnz_amax;    // sum |s w| * max|x_b|
};

// The float64 model with a scale per (row, column): scale(r, j).
template <class Scale>
Ref reference(const std::vector<int8_t>& w, int64_t m, int64_t k, const std::vector<float>& x,
              int64_t batch, Scale scale) {
  Ref ref;
  ref.y.resize(size_t(batch * m));
  ref.abs_sum.resize(size_t(batch * m));
  ref.nnz_amax.resize(size_t(batch * m));
  for (int64_t b = 0; b < batch; ++b) {
    double amax = 0;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(double(x[size_t(b * k + j)])));
    for (int64_t r = 0; r < m; ++r) {
      double acc = 0, abs = 0, nnz = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double sc = scale(r, j);
        const double t = double(w[size_t(r * k + j)]) * double(x[size_t(b * k + j)]) * sc;
        acc += t;
        abs += std::fabs(t);
        nnz += std::fabs(w[size_t(r * k + j)] * sc);
      }
      ref.y[size_t(b * m + r)] = acc;
      ref.abs_sum[size_t(b * m + r)] = abs;
      ref.nnz_amax[size_t(b * m + r)] = nnz * amax;
    }
  }
  return ref;
}

// Per-row scales s (len m), or none (s empty).
Ref reference(const std::vector<int8_t>& w, int64_t m, int64_t k, const std::vector<float>& x,
              int64_t batch, const std::vector<float>& s) {
  return reference(w, m, k, x, batch,
                   [&](int64_t r, int64_t) { return s.empty() ? 1.0 : double(s[size_t(r)]); });
}

class VariantTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    variant_ = cpukern::testing::find_test_variant(list_rows(), simde_variants(), GetParam());
    ASSERT_NE(variant_, nullptr);
    CPUKERN_SKIP_IF_UNSUPPORTED(*variant_);
  }

  std::shared_ptr<const PreparedWeights> prep(const std::vector<uint32_t>& p, int64_t m,
                                              int64_t k, const float* scale) {
#if defined(CPUKERN_TEST_SIMDE)
    return prepare_variant(*variant_, p.data(), m, k, scale);
#else
    return prepare(p.data(), m, words_for(k), k, scale, variant_->name);
#endif
  }

  const Variant* variant_ = nullptr;
};

std::vector<float> random_x(int64_t n, std::mt19937& rng, bool small_int) {
  std::vector<float> x(static_cast<size_t>(n));
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::uniform_int_distribution<int> di(-8, 8);
  for (auto& v : x) v = small_int ? float(di(rng)) : d(rng);
  return x;
}

TEST_P(VariantTest, Fp32AndInt8MatchFloat64Reference) {
  const int64_t ks[] = {1, 15, 16, 17, 31, 33, 4095, 4096 + 7};
  const int64_t ms[] = {1, 7, 8, 9, 17, 33};
  const int64_t bs[] = {1, 3, 16};
  const Fill fills[] = {Fill::kZeroRows, Fill::kAllPlus, Fill::kAllMinus, Fill::kRandom};
  std::mt19937 rng(1234);
  int checked = 0;
  for (int64_t k : ks)
    for (int64_t m : ms)
      for (Fill f : fills) {
        const auto w = make_weights(m, k, f, rng);
        const auto p = pack_weights(w, m, k);
        std::vector<float> s(static_cast<size_t>(m));
        for (auto& v : s) v = std::uniform_real_distribution<float>(-1.5f, 1.5f)(rng);
        const auto pw = prep(p, m, k, s.data());
        ASSERT_EQ(pw->isa, variant_->name);
        for (int64_t batch : bs) {
          if (k > 1000 && batch == 16 && f != Fill::kRandom) continue;  // keep it short
          const auto x = random_x(batch * k, rng, false);
          const Ref ref = reference(w, m, k, x, batch, s);
          std::vector<float> y1;
          for (int threads : {1, 2, 3}) {
            std::vector<float> y(size_t(batch * m), NAN);
            gemv(*pw, x.data(), batch, nullptr, 0, Act::kF32, threads, y.data());
            for (int64_t i = 0; i < batch * m; ++i) {
              const double bound = 1e-5 * ref.abs_sum[size_t(i)] + 1e-30;
              ASSERT_LE(std::fabs(double(y[size_t(i)]) - ref.y[size_t(i)]), bound)
                  << "fp32 k=" << k << " m=" << m << " batch=" << batch << " fill=" << fill_name(f)
                  << " threads=" << threads << " b=" << i / m << " r=" << i % m;
            }
            if (threads == 1) {
              y1 = y;
            } else {
              ASSERT_EQ(0, std::memcmp(y1.data(), y.data(), y.size() * 4))
                  << "thread count changed the fp32 result, k=" << k << " m=" << m;
            }
          }
          // int8 mode: |error| <= |s| * nnz * max|x| / 254 (rounding of q) + fp32 rounding.
          for (int threads : {1, 3}) {
            std::vector<float> y(size_t(batch * m), NAN);
            gemv(*pw, x.data(), batch, nullptr, 0, Act::kInt8, threads, y.data());
            for (int64_t i = 0; i < batch * m; ++i) {
              const double bound =
                  ref.nnz_amax[size_t(i)] / 254.0 * 1.0001 + 1e-5 * ref.abs_sum[size_t(i)] + 1e-30;
              ASSERT_LE(std::fabs(double(y[size_t(i)]) - ref.y[size_t(i)]), bound)
                  << "int8 k=" << k << " m=" << m << " batch=" << batch << " fill=" << fill_name(f)
                  << " threads=" << threads;
            }
          }
          ++checked;
        }
      }
  std::printf("[ %s ] checked %d (k, m, fill, batch) cases\n", variant_->name, checked);
}

// With small integer activations every partial sum is exact: every variant must give the
// reference variant's result bit for bit (fp32 and int8), for every scale mode.
TEST_P(VariantTest, BitwiseEqualToReferenceOnExactInputs) {
  std::mt19937 rng(99);
  // k = 255, 256, 320, 14336: the b3p5 kernels' last block reaches past the zero-padded
  // activations (a multiple of 256) and reads a local copy.
  // m = 115: 7 whole 16-row tiles and a ragged one (the 4-, 2- and 1-tile paths).
  for (int64_t k : {1, 17, 33, 255, 256, 320, 4096 + 7, 14336})
    for (int64_t m : {1, 9, 33, 115}) {
      const auto w = make_weights(m, k, Fill::kRandom, rng);
      const auto p = pack_weights(w, m, k);
      const auto pw = prep(p, m, k, nullptr);
      const auto pr = prepare(p.data(), m, words_for(k), k, nullptr, "reference");
      const int64_t batch = 5;
      const auto x = random_x(batch * k, rng, true);
      std::vector<float> s(static_cast<size_t>(m));
      for (auto& v : s) v = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
      for (Act act : {Act::kF32, Act::kInt8})
        for (int64_t slen : {int64_t(0), int64_t(1), m}) {
          std::vector<float> a(static_cast<size_t>(batch * m)), b(size_t(batch * m));
          gemv(*pw, x.data(), batch, s.data(), slen, act, 2, a.data());
          gemv(*pr, x.data(), batch, s.data(), slen, act, 1, b.data());
          ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4))
              << "k=" << k << " m=" << m << " act=" << int(act) << " scale_len=" << slen;
        }
      // int8 sums are exact for any input: bitwise equal across variants too.
      const auto xr = random_x(batch * k, rng, false);
      std::vector<float> a(static_cast<size_t>(batch * m)), b(size_t(batch * m));
      gemv(*pw, xr.data(), batch, nullptr, 0, Act::kInt8, 3, a.data());
      gemv(*pr, xr.data(), batch, nullptr, 0, Act::kInt8, 1, b.data());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "int8 k=" << k;
    }
}

// Rows long enough that the int8 kernels flush their int32 partial sums (the NEON SDOT/SMMLA
// kernels every 2048 blocks of 128 columns) and the fp32 kernels add many chunks: still
// bitwise equal to the reference (small-integer activations keep every fp32 sum exact).
TEST_P(VariantTest, LongRowsBitwiseEqualToReference) {
  std::mt19937 rng(4242);
  const int64_t m = 6, k = 2048 * 128 + 300, batch = 3;
  const auto w = make_weights(m, k, Fill::kRandom, rng);
  const auto p = pack_weights(w, m, k);
  const auto pw = prep(p, m, k, nullptr);
  const auto pr = prepare(p.data(), m, words_for(k), k, nullptr, "reference");
  const auto x = random_x(batch * k, rng, true);
  for (Act act : {Act::kF32, Act::kInt8}) {
    std::vector<float> a(size_t(batch * m)), b(size_t(batch * m));
    gemv(*pw, x.data(), batch, nullptr, 0, act, 2, a.data());
    gemv(*pr, x.data(), batch, nullptr, 0, act, 1, b.data());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "act=" << int(act);
  }
}

// Shapes that cross every tiling path of the blocked kernels: row counts that leave 7
// tiles of 16 (8-, 4-, 2- and 1-tile paths) and 3 rows of a 4-row tile, and k long enough
// for several accuracy chunks and several L2 passes (lut27r16: 12096 columns per pass at
// batch 1). Checked against float64 and across thread counts.
TEST_P(VariantTest, LargeShapesCrossTilingPaths) {
  std::mt19937 rng(77);
  const int64_t m = 16 * 15 - 5, k = 12100 + 17;
  const auto w = make_weights(m, k, Fill::kRandom, rng);
  const auto p = pack_weights(w, m, k);
  const auto pw = prep(p, m, k, nullptr);
  for (int64_t batch : {1, 2, 5}) {
    const auto x = random_x(batch * k, rng, false);
    const Ref ref = reference(w, m, k, x, batch, {});
    std::vector<float> y1;
    for (int threads : {1, 3}) {
      std::vector<float> y(size_t(batch * m), NAN);
      gemv(*pw, x.data(), batch, nullptr, 0, Act::kF32, threads, y.data());
      for (int64_t i = 0; i < batch * m; ++i)
        ASSERT_LE(std::fabs(double(y[size_t(i)]) - ref.y[size_t(i)]),
                  1e-5 * ref.abs_sum[size_t(i)] + 1e-30)
            << "fp32 batch=" << batch << " threads=" << threads << " b=" << i / m
            << " r=" << i % m;
      if (threads == 1) {
        y1 = y;
      } else {
        ASSERT_EQ(0, std::memcmp(y1.data(), y.data(), y.size() * 4)) << "batch=" << batch;
      }
      std::vector<float> yq(size_t(batch * m), NAN);
      gemv(*pw, x.data(), batch, nullptr, 0, Act::kInt8, threads, yq.data());
      for (int64_t i = 0; i < batch * m; ++i)
        ASSERT_LE(std::fabs(double(yq[size_t(i)]) - ref.y[size_t(i)]),
                  ref.nnz_amax[size_t(i)] / 254.0 * 1.0001 + 1e-5 * ref.abs_sum[size_t(i)])
            << "int8 batch=" << batch << " threads=" << threads;
    }
  }
}

// act="int8_bitnet" (act_bitnet.h): Hugging Face BitNet's per-token rule, s = 127 /
// max(max|x|, 1e-5), q = round(x s), y = scale * sum(w q) / s, against a model of it written
// here; rows with max|x| below the 1e-5 floor (where the rule differs from kInt8), zero rows
// and ragged k included.
TEST_P(VariantTest, Int8BitNetRule) {
  std::mt19937 rng(5);
  const int64_t m = 37, k = 301, batch = 5;
  const auto w = make_weights(m, k, Fill::kRandom, rng);
  const auto p = pack_weights(w, m, k);
  const std::vector<float> scale(size_t(m), 0.75f);
  const auto pw = prep(p, m, k, scale.data());
  auto x = random_x(batch * k, rng, false);
  const float row_gain[batch] = {1.0f, 3e4f, 2e-7f, 0.0f, 4e-6f};
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < k; ++j) x[size_t(b * k + j)] *= row_gain[b];
  std::vector<float> y(size_t(batch * m), NAN), y8(size_t(batch * m), NAN);
  gemv(*pw, x.data(), batch, nullptr, 0, Act::kInt8BitNet, 2, y.data());
  gemv(*pw, x.data(), batch, nullptr, 0, Act::kInt8, 1, y8.data());
  bool differs_on_tiny_rows = false;
  for (int64_t b = 0; b < batch; ++b) {
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(x[size_t(b * k + j)]));
    const float s = 127.0f / std::max(amax, 1e-5f);
    for (int64_t r = 0; r < m; ++r) {
      int64_t acc = 0, mag = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t q = int64_t(std::nearbyint(x[size_t(b * k + j)] * s));
        acc += w[size_t(r * k + j)] * q;
        mag += std::abs(w[size_t(r * k + j)] * q);
      }
      const double want = 0.75 * double(acc) / double(s);
      const double got = y[size_t(b * m + r)];
      ASSERT_LE(std::fabs(got - want), 4e-7 * 0.75 * double(mag) / double(s) + 1e-37)
          << "b=" << b << " r=" << r;
      if (row_gain[b] < 1e-5f && row_gain[b] > 0.0f && y8[size_t(b * m + r)] != y[size_t(b * m + r)])
        differs_on_tiny_rows = true;
    }
  }
  EXPECT_TRUE(differs_on_tiny_rows) << "rows below the 1e-5 floor should quantise differently";
}

// Both int8 rules round half to even (std::nearbyint, torch.round): with max|x| = 127 the
// scale is exactly 1, so half-integer activations are ties and y is the exact integer sum of
// w * nearbyint(x), bit for bit, on every ragged k.
TEST_P(VariantTest, Int8RoundsHalfToEven) {
  std::mt19937 rng(8);
  const int64_t m = 21, batch = 3;
  for (int64_t k : {1, 2, 15, 16, 17, 47, 300, 2560 + 3}) {
    const auto w = make_weights(m, k, Fill::kRandom, rng);
    const auto pw = prep(pack_weights(w, m, k), m, k, nullptr);
    std::vector<float> x(size_t(batch * k));
    std::uniform_int_distribution<int> half(-127, 126), kind(0, 2);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < k; ++j) {
        const int c = kind(rng);
        x[size_t(b * k + j)] = c == 0   ? float(half(rng)) + 0.5f
                               : c == 1 ? float(half(rng))
                                        : std::uniform_real_distribution<float>(-127.0f, 127.0f)(rng);
      }
    for (int64_t b = 0; b < batch; ++b) x[size_t(b * k + (b * 7) % k)] = b % 2 ? -127.0f : 127.0f;
    for (Act act : {Act::kInt8, Act::kInt8BitNet}) {
      std::vector<float> y(size_t(batch * m), NAN);
      gemv(*pw, x.data(), batch, nullptr, 0, act, 2, y.data());
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t r = 0; r < m; ++r) {
          int64_t acc = 0;
          for (int64_t j = 0; j < k; ++j)
            acc += w[size_t(r * k + j)] * int64_t(std::nearbyint(x[size_t(b * k + j)]));
          ASSERT_EQ(y[size_t(b * m + r)], float(acc))
              << "k=" << k << " act=" << int(act) << " b=" << b << " r=" << r;
        }
    }
  }
}

// Group scales (grouped.h): one scale per row and group of G columns. Exact inputs (small
// integer x, power-of-two scales) give the float64 model's value exactly in fp32 mode; int8
// mode equals the reference variant bitwise (exact int32 group sums, one shared epilogue);
// random inputs stay within the fp32 bound; no result depends on the thread count.
TEST_P(VariantTest, GroupScalesMatchFloat64Model) {
  std::mt19937 rng(515);
  struct Shape { int64_t m, k, g; };
  const Shape shapes[] = {{1, 16, 16}, {9, 100, 32}, {130, 300, 64}, {5, 100, 256},
                          {257, 1000, 256}, {300, 512, 128}, {129, 4096 + 7, 256}};
  for (const Shape& sh : shapes) {
    const int64_t m = sh.m, k = sh.k, g = sh.g, groups = groups_for(k, g);
    const auto w = make_weights(m, k, Fill::kRandom, rng);
    const auto p = pack_weights(w, m, k);
    std::vector<float> s2(size_t(m * groups)), sr(size_t(m * groups));
    for (auto& v : s2) v = std::ldexp(std::uniform_int_distribution<int>(0, 1)(rng) ? 1.0f : -1.0f,
                                      std::uniform_int_distribution<int>(-3, 3)(rng));
    for (auto& v : sr) v = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    for (const auto* s : {&s2, &sr}) {
      const bool exact = s == &s2;
#if defined(CPUKERN_TEST_SIMDE)
      const auto pw = prepare_variant(*variant_, p.data(), m, k, s->data(), 2, g);
#else
      const auto pw = prepare(p.data(), m, words_for(k), k, s->data(), variant_->name, 2, g);
#endif
      const auto pr = prepare(p.data(), m, words_for(k), k, s->data(), "reference", 1, g);
      ASSERT_EQ(pw->group_size, g);
      for (int64_t batch : {1, 5}) {
        const auto x = random_x(batch * k, rng, exact);
        std::vector<float> y(size_t(batch * m)), y3(y.size()), yr(y.size());
        gemv(*pw, x.data(), batch, nullptr, 0, Act::kF32, 1, y.data());
        gemv(*pw, x.data(), batch, nullptr, 0, Act::kF32, 3, y3.data());
        ASSERT_EQ(0, std::memcmp(y.data(), y3.data(), y.size() * 4)) << "threads, k=" << k;
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t r = 0; r < m; ++r) {
            double model = 0, bound = 0;
            for (int64_t gi = 0; gi < groups; ++gi) {
              double part = 0, mag = 0;
              for (int64_t j = gi * g; j < std::min(k, gi * g + g); ++j) {
                part += double(w[size_t(r * k + j)]) * x[size_t(b * k + j)];
                mag += std::fabs(double(w[size_t(r * k + j)]) * x[size_t(b * k + j)]);
              }
              model += double((*s)[size_t(r * groups + gi)]) * part;
              bound += std::fabs(double((*s)[size_t(r * groups + gi)])) * mag;
            }
            const double got = y[size_t(b * m + r)];
            if (exact)
              ASSERT_EQ(got, model) << "m=" << m << " k=" << k << " g=" << g << " [" << b << ", " << r << "]";
            else
              ASSERT_LE(std::fabs(got - model), 1e-5 * bound + 1e-30)
                  << "m=" << m << " k=" << k << " g=" << g << " [" << b << ", " << r << "]";
          }
        gemv(*pw, x.data(), batch, nullptr, 0, Act::kInt8, 2, y.data());
        gemv(*pr, x.data(), batch, nullptr, 0, Act::kInt8, 1, yr.data());
        ASSERT_EQ(0, std::memcmp(y.data(), yr.data(), y.size() * 4)) << "int8 m=" << m << " k=" << k;
      }
    }
  }
}

// Activations near fp32's max (max|x| 3e37 and 3e38; K max|x| far past FLT_MAX) with small
// scales, so that the exact results are finite: every partial sum used to overflow to inf
// (fp32) and float(acc) * dq too (int8), where now the rows run pre-scaled by an exact power
// of two (prescale.h) and the epilogues work in double. fp32: y(x) equals y(x * 2**-40)
// times 2**40 bit for bit (the pre-scaled row is the plain row's computation, exactly
// scaled) and lies within the fp32 bound; int8: within the int8 bound and bitwise equal to
// the reference; batch rows of different magnitudes; per-row and group scales.
TEST_P(VariantTest, HugeActivationsGiveFiniteResults) {
  std::mt19937 rng(2718);
  for (int64_t k : {int64_t(301), int64_t(4096 + 7)})
    for (int64_t g : {int64_t(0), int64_t(64)}) {
      const int64_t m = 37, batch = 4, groups = g ? groups_for(k, g) : 1;
      const auto w = make_weights(m, k, Fill::kRandom, rng);
      const auto p = pack_weights(w, m, k);
      std::vector<float> s(size_t(m * groups));
      for (auto& v : s) v = std::uniform_real_distribution<float>(0.5f, 1.0f)(rng) / float(k);
#if defined(CPUKERN_TEST_SIMDE)
      const auto pw = prepare_variant(*variant_, p.data(), m, k, s.data(), 2, g);
#else
      const auto pw = prepare(p.data(), m, words_for(k), k, s.data(), variant_->name, 2, g);
#endif
      const auto pr = prepare(p.data(), m, words_for(k), k, s.data(), "reference", 1, g);
      auto x = random_x(batch * k, rng, false);
      const float mags[batch] = {1.0f, 1.5e37f, 1.5e38f, 1e-3f};  // |x| < 2 before
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t j = 0; j < k; ++j) x[size_t(b * k + j)] *= mags[b];
      std::vector<float> xs(x);
      for (auto& v : xs) v = std::ldexp(v, -40);
      // the float64 model with the effective per-(row, column) scale
      const Ref ref = reference(w, m, k, x, batch, [&](int64_t r, int64_t j) {
        return double(s[size_t(g ? r * groups + j / g : r)]);
      });
      const std::vector<double>&want = ref.y, &mag = ref.abs_sum, &nnz = ref.nnz_amax;
      std::vector<float> y(size_t(batch * m)), ys(y.size()), yq(y.size()), yr(y.size());
      for (int threads : {1, 3}) {
        gemv(*pw, x.data(), batch, nullptr, 0, Act::kF32, threads, y.data());
        gemv(*pw, xs.data(), batch, nullptr, 0, Act::kF32, threads, ys.data());
        gemv(*pw, x.data(), batch, nullptr, 0, Act::kInt8, threads, yq.data());
        gemv(*pr, x.data(), batch, nullptr, 0, Act::kInt8, 1, yr.data());
        for (int64_t i = 0; i < batch * m; ++i) {
          const double wv = want[size_t(i)];
          ASSERT_TRUE(std::isfinite(y[size_t(i)]) && std::isfinite(yq[size_t(i)]))
              << "k=" << k << " g=" << g << " b=" << i / m << " r=" << i % m << ": fp32 "
              << y[size_t(i)] << ", int8 " << yq[size_t(i)] << ", exact " << wv;
          ASSERT_LE(std::fabs(double(y[size_t(i)]) - wv), 1e-5 * mag[size_t(i)] + 1e-30)
              << "fp32 k=" << k << " g=" << g << " b=" << i / m << " r=" << i % m;
          ASSERT_LE(std::fabs(double(yq[size_t(i)]) - wv),
                    nnz[size_t(i)] / 254.0 * 1.0001 + 1e-5 * mag[size_t(i)] + 1e-30)
              << "int8 k=" << k << " g=" << g << " b=" << i / m << " r=" << i % m;
          if (i / m == 1 || i / m == 2) {  // the pre-scaled rows
            ASSERT_EQ(y[size_t(i)], std::ldexp(ys[size_t(i)], 40))
                << "k=" << k << " g=" << g << " b=" << i / m << " r=" << i % m;
          }
        }
        ASSERT_EQ(0, std::memcmp(yq.data(), yr.data(), yq.size() * 4)) << "int8 vs reference";
      }
      // batch rows alone equal their rows of the batch
      for (int64_t b = 0; b < batch; ++b) {
        std::vector<float> y1(static_cast<size_t>(m));
        gemv(*pw, x.data() + b * k, 1, nullptr, 0, Act::kF32, 1, y1.data());
        ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + b * m, size_t(m) * 4)) << "b=" << b;
      }
    }
}

TEST_P(VariantTest, EmptyShapes) {
  std::mt19937 rng(5);
  // k = 0: y = 0.
  {
    const auto pw = prep({0u}, 3, 0, nullptr);
    std::vector<float> y(6, NAN);
    gemv(*pw, nullptr, 2, nullptr, 0, Act::kF32, 1, y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f);
    std::fill(y.begin(), y.end(), NAN);
    gemv(*pw, nullptr, 2, nullptr, 0, Act::kInt8, 1, y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
  // m = 0 and batch = 0: nothing written.
  {
    const auto pw = prep({0u}, 0, 5, nullptr);
    const auto x = random_x(10, rng, false);
    gemv(*pw, x.data(), 2, nullptr, 0, Act::kF32, 1, nullptr);
    const auto w = make_weights(4, 5, Fill::kRandom, rng);
    const auto p2 = prep(pack_weights(w, 4, 5), 4, 5, nullptr);
    gemv(*p2, nullptr, 0, nullptr, 0, Act::kF32, 1, nullptr);
  }
}

// Every batch row is bitwise its batch-1 result, in both modes, whatever order a kernel takes
// the batch in (the int8 kernels: groups of 4, then 3, 2 or 1, over the same rows; the AVX2
// fp32 kernel: batch pairs, then a single row, inside each chunk of a tile group). Rows of
// ~10 KB (int8) span many fp32 chunks; m = 37 leaves a ragged tile group.
TEST_P(VariantTest, BatchRowsEqualTheirBatchOneResults) {
  std::mt19937 rng(5);
  const int64_t m = 37, k = 40003;
  const auto w = make_weights(m, k, Fill::kRandom, rng);
  const auto pw = prep(pack_weights(w, m, k), m, k, nullptr);
  for (Act act : {Act::kInt8, Act::kF32})
    for (int64_t batch : {2, 3, 4, 5, 8, 9}) {
      const auto x = random_x(batch * k, rng, false);
      std::vector<float> y(size_t(batch * m), NAN), one(size_t(m), NAN);
      gemv(*pw, x.data(), batch, nullptr, 0, act, 1, y.data());
      for (int64_t b = 0; b < batch; ++b) {
        gemv(*pw, x.data() + b * k, 1, nullptr, 0, act, 1, one.data());
        ASSERT_EQ(0, std::memcmp(one.data(), y.data() + b * m, size_t(m) * 4))
            << (act == Act::kInt8 ? "int8" : "fp32") << " batch " << batch << " row " << b;
      }
    }
}

// gemv_multi: the matrices of a layer sharing x (q, k, v) in one call give each matrix's own
// gemv result bitwise, in every act and for 1 and 3 threads, with and without scales.
TEST_P(VariantTest, MultiEqualsEachMatrixAlone) {
  std::mt19937 rng(17);
  const int64_t k = 301;
  const int64_t ms[3] = {37, 8, 130};
  std::vector<std::shared_ptr<const PreparedWeights>> pws;
  std::vector<std::vector<float>> scales;
  for (int64_t i = 0; i < 3; ++i) {
    const auto w = make_weights(ms[i], k, Fill::kRandom, rng);
    scales.push_back(random_x(ms[i], rng, false));
    pws.push_back(prep(pack_weights(w, ms[i], k), ms[i], k, i == 1 ? nullptr : scales.back().data()));
  }
  const PreparedWeights* ws[3] = {pws[0].get(), pws[1].get(), pws[2].get()};
  for (Act act : {Act::kInt8BitNet, Act::kInt8, Act::kF32})
    for (int threads : {1, 3})
      for (int64_t batch : {1, 3}) {
        const auto x = random_x(batch * k, rng, false);
        std::vector<std::vector<float>> got(3), want(3);
        float* ys[3];
        for (int64_t i = 0; i < 3; ++i) {
          got[i].assign(size_t(batch * ms[i]), NAN);
          want[i].assign(size_t(batch * ms[i]), NAN);
          ys[i] = got[i].data();
          gemv(*ws[i], x.data(), batch, nullptr, 0, act, 1, want[i].data());
        }
        gemv_multi(ws, 3, x.data(), batch, act, threads, ys);
        for (int64_t i = 0; i < 3; ++i)
          ASSERT_EQ(0, std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4))
              << "matrix " << i << " act " << int(act) << " threads " << threads << " batch "
              << batch;
      }
  // Validation: matrices of other K, outputs over each other; nothing written.
  const auto other = prep(pack_weights(make_weights(4, k + 1, Fill::kRandom, rng), 4, k + 1),
                          4, k + 1, nullptr);
  const PreparedWeights* mixed[2] = {ws[0], other.get()};
  const auto x = random_x(k, rng, false);
  std::vector<float> a(size_t(ms[0]), NAN), b(size_t(ms[0]), NAN);
  float* two[2] = {a.data(), b.data()};
  EXPECT_THROW(gemv_multi(mixed, 2, x.data(), 1, Act::kInt8, 1, two), InvalidArgument);
  const PreparedWeights* same[2] = {ws[0], ws[0]};
  float* overlapping[2] = {a.data(), a.data()};
  EXPECT_THROW(gemv_multi(same, 2, x.data(), 1, Act::kInt8, 1, overlapping), InvalidArgument);
  EXPECT_TRUE(std::isnan(a[0]) && std::isnan(b[0]));
  EXPECT_THROW(gemv_multi(same, 0, x.data(), 1, Act::kInt8, 1, two), InvalidArgument);
}

// The int8 layout is packed at the first int8 call, once, even when threads race for it.
TEST_P(VariantTest, Int8LayoutPackedLazilyOnce) {
  std::mt19937 rng(11);
  const int64_t m = 37, k = 301, batch = 2;
  const auto w = make_weights(m, k, Fill::kRandom, rng);
  const auto p = pack_weights(w, m, k);
  const auto pw = prep(p, m, k, nullptr);
  const auto& uk = variant_->ukernel;
  EXPECT_EQ(pw->nbytes(), uk.f32.packed_size(m, k));
  const auto x = random_x(batch * k, rng, true);
  const Ref ref = reference(w, m, k, x, batch, {});
  std::vector<std::vector<float>> ys(4, std::vector<float>(size_t(batch * m), NAN));
  std::vector<std::thread> ts;
  for (auto& y : ys)
    ts.emplace_back([&] { gemv(*pw, x.data(), batch, nullptr, 0, Act::kInt8, 1, y.data()); });
  for (auto& t : ts) t.join();
  for (const auto& y : ys) ASSERT_EQ(0, std::memcmp(ys[0].data(), y.data(), y.size() * 4));
  const bool shared = std::string(uk.f32.layout) == uk.i8.layout;
  EXPECT_EQ(pw->nbytes(), uk.f32.packed_size(m, k) + (shared ? 0 : uk.i8.packed_size(m, k)));
  // Small-integer activations with max |x| = 8: q = x * 127/8 is not exact, so compare
  // against the int8 bound.
  for (int64_t i = 0; i < batch * m; ++i)
    ASSERT_LE(std::fabs(double(ys[0][size_t(i)]) - ref.y[size_t(i)]),
              ref.nnz_amax[size_t(i)] / 254.0 * 1.0001 + 1e-5 * ref.abs_sum[size_t(i)]);
}

// prepare packs row tiles in parallel: the fp32 layout and the lazily packed int8 layout
// are the same bytes for any thread count (several tasks with a ragged last one), and equal
// what the layout's packer writes for the whole matrix in one call.
TEST_P(VariantTest, PreparedBytesIndependentOfThreads) {
  std::mt19937 rng(31);
  const auto& uk = variant_->ukernel;
  for (const auto& [m, k] : {std::pair<int64_t, int64_t>{16 * 40 + 9, 4096 + 29}, {3, 70000}}) {
    const auto p = pack_weights(make_weights(m, k, Fill::kRandom, rng), m, k);
    std::vector<uint8_t> f32(size_t(uk.f32.packed_size(m, k))), i8(size_t(uk.i8.packed_size(m, k)));
    packer_for(uk.f32.layout).pack(p.data(), m, k, f32.data());
    packer_for(uk.i8.layout).pack(p.data(), m, k, i8.data());
    for (int threads : {1, 2, 3, 7}) {
      const auto pw = prepare_variant(*variant_, p.data(), m, k, nullptr, threads);
      ASSERT_EQ(0, std::memcmp(pw->layout(), f32.data(), f32.size()))
          << "fp32 layout, threads=" << threads << " m=" << m << " k=" << k;
      ASSERT_EQ(0, std::memcmp(pw->i8_data(threads), i8.data(), i8.size()))
          << "int8 layout, threads=" << threads << " m=" << m << " k=" << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, VariantTest,
    ::testing::ValuesIn(cpukern::testing::test_variant_names(list_rows(), simde_variants())),
    [](const auto& info) { return info.param; });

// The reference of every layout: layouts.h restated weight by weight from the int8 weights
// (slow and obvious; independent of the packers' tables and bit streams).
std::vector<uint8_t> reference_layout(const std::string& layout, const std::vector<int8_t>& w,
                                      int64_t m, int64_t k, int64_t size) {
  std::vector<uint8_t> out(size_t(size), 0);
  auto u32 = [&](int64_t i) -> uint32_t& {
    EXPECT_LE((i + 1) * 4, size) << layout;
    return reinterpret_cast<uint32_t*>(out.data())[i];
  };
  const int64_t words = words_for(k);
  auto wt = [&](int64_t r, int64_t j) { return int(w[size_t(r * k + j)]); };
  auto tiles = [&](int64_t rows) { return (m + rows - 1) / rows; };
  if (layout == "t2p16" || layout == "t2p16r16") {
    const int64_t R = layout == "t2p16" ? 1 : 16;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j)
        u32((r / R) * words * R + (j / 16) * R + r % R) |= ternary_codes::encode(wt(r, j), int(j % 16));
  } else if (layout == "lut3r8") {
    const int64_t nblk = (k + 29) / 30;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j)
        if (wt(r, j) != 0)
          u32((r / 8) * nblk * 16 + (j / 30) * 16 + (wt(r, j) < 0 ? 8 : 0) + r % 8) |=
              1u << (j % 30);
  } else if (layout == "lut27r16") {
    const int64_t nblk = (k + 17) / 18;
    for (int64_t i = 0; i < tiles(16) * nblk * 16; ++i)
      for (int g = 0; g < 6; ++g) u32(i) |= 13u << (5 * g);  // three zero weights
    const uint32_t pow3[3] = {1, 3, 9};
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j)
        u32((r / 16) * nblk * 16 + (j / 18) * 16 + r % 16) +=
            uint32_t(wt(r, j)) * (pow3[(j % 18) % 3] << (5 * ((j % 18) / 3)));
  } else if (layout == "lut4r16") {
    const int64_t groups = (k + 3) / 4;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j)
        if (wt(r, j) != 0)
          out[size_t((r / 16) * groups * 16 + (j / 4) * 16 + r % 16)] |=
              uint8_t(1u << (j % 4 + (wt(r, j) < 0 ? 4 : 0)));
  } else if (layout.rfind("q2b", 0) == 0) {  // q2b128, q2b256, q2b128r4, q2b256r4
    const int64_t C = layout.substr(3, 3) == "128" ? 128 : 256, rb = (k + C - 1) / C * (C / 4);
    const int64_t G = layout.size() > 6 ? 4 : 1, full = m / G * G;  // r4: 4 rows interleaved
    std::fill(out.begin(), out.end(), uint8_t(0x55));  // w = 0 everywhere, past k too
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t c = j % C, q = c / (C / 4);
        // Rows of a full group of G: [block][row in group][C/4 bytes]; the rest row-major.
        const int64_t at = r < full ? (r / G) * G * rb + (j / C) * G * (C / 4) + (r % G) * (C / 4)
                                    : r * rb + (j / C) * (C / 4);
        uint8_t& byte = out[size_t(at + c % (C / 4))];
        byte = uint8_t((byte & ~(3u << (2 * q))) | (uint32_t(wt(r, j) + 1) << (2 * q)));
      }
  } else if (layout == "b3p5c160" || layout == "b3p5c320") {
    const int64_t C = layout == "b3p5c160" ? 160 : 320, VB = C / 5, rb = (k + C - 1) / C * VB;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < rb; ++i) {
        int v = 0;  // sum_d t_d 3^(4-d), t = w + 1 (1 past k)
        for (int64_t d = 0; d < 5; ++d) {
          const int64_t j = i / VB * C + d * VB + i % VB;
          v = 3 * v + (j < k ? wt(r, j) + 1 : 1);
        }
        out[size_t(r * rb + i)] = uint8_t(((v * 256 + 242) / 243) ^ 0x80);
      }
  } else {
    ADD_FAILURE() << "no reference for layout " << layout << ": add it here";
  }
  return out;
}

// Every packer of the kernel list writes exactly the reference bytes (every byte: the
// output starts as garbage), also when called on row ranges the way prepare's tasks call it
// (rows [r0, r0 + n) at packed_size(r0, k), r0 a multiple of 16, every layout's tile), and
// unpack restores the public words. Edge shapes: m = 1, k = 1, ragged row tiles, k around
// each layout's column group (3, 4, 16, 18, 30, 128, 256) and a large k.
class PackerTest : public ::testing::TestWithParam<std::string> {};

// The b3p5 decode (layouts.h) for every 5-trit code: byte = ceil(v 256 / 243) ^ 0x80; digit
// d = [s > -43] + [s > 42] with s = 3^d (byte as int8) mod 256, and = floor(3 b_d / 256).
TEST(B3p5Layout, DecodeOfEveryCode) {
  for (int v = 0; v < 243; ++v) {
    const uint8_t stored = uint8_t(((v * 256 + 242) / 243) ^ 0x80);
    int8_t s = int8_t(stored);
    uint32_t b = stored ^ 0x80u;
    for (int d = 0; d < 5; ++d) {
      int p = 1;
      for (int i = d; i < 4; ++i) p *= 3;
      const int t = v / p % 3;
      EXPECT_EQ((s > -43) + (s > 42), t) << "v=" << v << " d=" << d;
      EXPECT_EQ(int((3 * b) >> 8), t) << "v=" << v << " d=" << d;
      s = int8_t(uint8_t(3 * uint8_t(s)));
      b = (3 * b) & 255u;
    }
  }
}

// packed_size of `layout`, from a micro-kernel that reads it and that this CPU may call
// (SIMDe rows first: portable code).
int64_t (*layout_size(const char* layout))(int64_t, int64_t) {
  std::vector<const Variant*> rows;
  for (const auto& v : simde_variants()) rows.push_back(&v);
  for (const auto& v : list_rows())
    if (v.supported()) rows.push_back(&v);
  for (const Variant* v : rows) {
    if (std::string(v->ukernel.f32.layout) == layout) return v->ukernel.f32.packed_size;
    if (std::string(v->ukernel.i8.layout) == layout) return v->ukernel.i8.packed_size;
  }
  return nullptr;
}

TEST_P(PackerTest, ReferenceBytesOnEdgeShapesRowRangesAndRoundTrip) {
  const PackerRow* row = nullptr;
  for (const auto& r : packers())
    if (GetParam() == r.packer.name) row = &r;
  ASSERT_NE(row, nullptr);
  if (!row->supported())
    GTEST_SKIP() << row->packer.name << " needs CPU features this CPU lacks: "
                 << joined(missing_features(row->required));
  const auto size = layout_size(row->layout);
  if (!size) GTEST_SKIP() << "no micro-kernel this CPU runs reads layout " << row->layout;
  std::mt19937 rng(21);
  struct Case {
    int64_t m, k;
  };
  std::vector<Case> cases;
  for (int64_t k : {1, 2, 3, 4, 5, 15, 16, 17, 18, 19, 29, 30, 31, 32, 35, 36, 37, 60, 61, 127,
                    128, 129, 255, 256, 257, 1000})
    for (int64_t m : {1, 7, 8, 9, 16, 17, 33}) cases.push_back({m, k});
  cases.push_back({40, 14336 + 5});  // large
  int checked = 0;
  for (const Case& c : cases) {
    const int64_t m = c.m, k = c.k;
    const Fill fill = checked % 7 == 3 ? Fill::kAllMinus : checked % 7 == 5 ? Fill::kAllPlus
                                                                            : Fill::kRandom;
    const auto w = make_weights(m, k, fill, rng);
    const auto p = pack_weights(w, m, k);
    const auto ref = reference_layout(row->layout, w, m, k, size(m, k));
    std::vector<uint8_t> a(ref.size(), 0xA5);
    row->packer.pack(p.data(), m, k, a.data());
    ASSERT_EQ(a, ref) << row->packer.name << " k=" << k << " m=" << m;
    // Row ranges of 16 rows (a ragged last one), packed last to first.
    std::vector<uint8_t> b(ref.size(), 0x5A);
    const int64_t words = words_for(k);
    for (int64_t r0 = (m - 1) / 16 * 16; r0 >= 0; r0 -= 16)
      row->packer.pack(p.data() + r0 * words, std::min<int64_t>(16, m - r0), k,
                       b.data() + size(r0, k));
    ASSERT_EQ(b, ref) << row->packer.name << " by 16-row ranges, k=" << k << " m=" << m;
    ++checked;
    if (!row->packer.unpack) continue;
    std::vector<uint32_t> back(size_t(m * words) + 1, 0xFFFFFFFFu);
    back.back() = p.back();
    row->packer.unpack(a.data(), m, k, back.data());
    ASSERT_EQ(back, p) << row->packer.name << " unpack k=" << k << " m=" << m;
    // The last 16-row range alone (the lazy int8 layout unpacks by ranges).
    const int64_t r0 = (m - 1) / 16 * 16;
    std::vector<uint32_t> part(size_t((m - r0) * words), 0xFFFFFFFFu);
    row->packer.unpack(a.data() + size(r0, k), m - r0, k, part.data());
    ASSERT_TRUE(std::equal(part.begin(), part.end(), p.begin() + r0 * words))
        << row->packer.name << " unpack of rows " << r0 << ".., k=" << k << " m=" << m;
  }
  std::printf("[ %s ] checked %d shapes\n", row->packer.name, checked);
}

std::vector<std::string> packer_names() {
  std::vector<std::string> names;
  for (const auto& r : packers()) names.push_back(r.packer.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Packers, PackerTest, ::testing::ValuesIn(packer_names()),
                         [](const auto& info) { return info.param; });

#if !defined(CPUKERN_TEST_SIMDE)
template <class F>
void expect_arg_error(F f, const std::string& arg) {
  try {
    f();
    ADD_FAILURE() << "expected an error naming '" << arg << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(arg + ":", 0), 0u) << e.what();
  }
}

TEST(TernaryApi, PrepareValidates) {
  std::vector<uint32_t> ok = {0x2u, 0x4u};
  EXPECT_NO_THROW(prepare(ok.data(), 2, 1, 2, nullptr, ""));
  std::vector<uint32_t> bad = {0x3u};
  expect_arg_error([&] { prepare(bad.data(), 1, 1, 16, nullptr, ""); }, "packed");
  std::vector<uint32_t> past = {0x2u | (1u << 10)};  // code at column 5, k = 4
  expect_arg_error([&] { prepare(past.data(), 1, 1, 4, nullptr, ""); }, "packed");
  expect_arg_error([&] { prepare(ok.data(), 1, 2, 2, nullptr, ""); }, "packed");
  expect_arg_error([&] { prepare(ok.data(), 1, 1, -1, nullptr, ""); }, "k");
  expect_arg_error([&] { prepare(ok.data(), -1, 1, 2, nullptr, ""); }, "packed");
  expect_arg_error([&] { prepare(nullptr, 1, 1, 2, nullptr, ""); }, "packed");
  expect_arg_error([&] { prepare(ok.data(), 1, 1, 2, nullptr, "no_such_isa"); }, "variant");
}

// The words are validated by prepare's parallel tasks; the error names the first bad word
// in row-major order for any thread count, and both checks stay (0b11, nonzero past k).
TEST(TernaryApi, PrepareReportsTheFirstBadWordForAnyThreadCount) {
  const int64_t m = 700, k = 4100, words = words_for(k);  // several tasks
  std::vector<uint32_t> p(size_t(m * words), 0x2u);
  p[size_t(650 * words + 3)] = 0x3u << 8;                  // 0b11 in a late task
  p[size_t(300 * words + words - 1)] = 0x2u << (2 * 4);    // k % 16 = 4: column 4 is past k
  p[size_t(301 * words + 1)] = 0xCu;                      // 0b11, later in row-major order
  for (int threads : {1, 2, 3, 8})
    for (const char* isa : {"reference", ""}) {
      try {
        prepare(p.data(), m, words, k, nullptr, isa, threads);
        ADD_FAILURE() << "expected an error";
      } catch (const InvalidArgument& e) {
        EXPECT_EQ(std::string(e.what()),
                  "packed: nonzero code past k = 4100 for column 4100 of row 300 (word [300, 256])")
            << "threads=" << threads;
      }
    }
  p[size_t(300 * words + words - 1)] = 0x2u;
  try {
    prepare(p.data(), m, words, k, nullptr, "", 2);
    ADD_FAILURE() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "packed: invalid code 0b11 for weight [301, 17] (word [301, 1])");
  }
  expect_arg_error([&] { prepare(p.data(), m, words, k, nullptr, "", -1); }, "threads");
}

TEST(TernaryApi, GroupScalesValidate) {
  const int64_t m = 4, k = 64;
  std::vector<uint32_t> p(size_t(m * words_for(k)), 0);
  std::vector<float> s(size_t(m * 4), 1.0f), x(size_t(k), 1.0f), y(static_cast<size_t>(m));
  expect_arg_error([&] { prepare(p.data(), m, words_for(k), k, s.data(), "", 0, 8); }, "group_size");
  expect_arg_error([&] { prepare(p.data(), m, words_for(k), k, s.data(), "", 0, 24); }, "group_size");
  expect_arg_error([&] { prepare(p.data(), m, words_for(k), k, nullptr, "", 0, 16); }, "scale");
  const auto w = prepare(p.data(), m, words_for(k), k, s.data(), "", 0, 16);
  expect_arg_error([&] { gemv(*w, x.data(), 1, s.data(), 1, Act::kF32, 1, y.data()); }, "scale");
}

TEST(TernaryApi, GemvValidatesBeforeWriting) {
  std::vector<uint32_t> p = {0x2u, 0x4u, 0x6u};
  const auto pw = prepare(p.data(), 3, 1, 2, nullptr, "");
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f}, s = {1, 2};
  std::vector<float> y(6, 7.0f);
  expect_arg_error([&] { gemv(*pw, x.data(), 2, s.data(), 2, Act::kF32, 1, y.data()); }, "scale");
  expect_arg_error([&] { gemv(*pw, x.data(), 2, nullptr, 1, Act::kF32, 1, y.data()); }, "scale");
  expect_arg_error([&] { gemv(*pw, x.data(), -1, nullptr, 0, Act::kF32, 1, y.data()); }, "batch");
  expect_arg_error([&] { gemv(*pw, nullptr, 2, nullptr, 0, Act::kF32, 1, y.data()); }, "x");
  expect_arg_error([&] { gemv(*pw, x.data(), 2, nullptr, 0, Act::kF32, 1, nullptr); }, "y");
  expect_arg_error([&] { gemv(*pw, x.data(), 2, nullptr, 0, Act(7), 1, y.data()); }, "act");
  expect_arg_error([&] { gemv(*pw, x.data(), 2, nullptr, 0, Act::kF32, 1 << 20, y.data()); },
                   "threads");
  expect_arg_error([&] { gemv(*pw, x.data(), 2, nullptr, 0, Act::kF32, -1, y.data()); },
                   "threads");
  x[3] = NAN;
  expect_arg_error([&] { gemv(*pw, x.data(), 2, nullptr, 0, Act::kInt8, 1, y.data()); }, "x");
  for (float v : y) EXPECT_EQ(v, 7.0f);
  // fp32 mode propagates NaN instead.
  gemv(*pw, x.data(), 2, nullptr, 0, Act::kF32, 1, y.data());
  EXPECT_EQ(y[0], 1.0f);          // row 0: +x0
  EXPECT_EQ(y[1], -2.0f);         // row 1: -x1
  EXPECT_EQ(y[2], -1.0f);         // row 2: x0 - x1
  EXPECT_EQ(y[3], 3.0f);          // batch 1, row 0
  EXPECT_TRUE(std::isnan(y[4]));  // batch 1, row 1: -x1 = -NaN
}

TEST(TernaryApi, ListVariants) {
  const auto vs = list_variants();
  int selected = 0;
  bool has_ref = false;
  for (const auto& v : vs) {
    selected += v.selected;
    has_ref |= v.name == "reference";
    std::printf("variant %-12s ukernel %-42s supported=%d selected=%d\n", v.name.c_str(),
                v.ukernel.c_str(), int(v.supported), int(v.selected));
  }
  EXPECT_EQ(selected, 1);
  EXPECT_TRUE(has_ref);
}

// list_variants() (cpukern.kernels()) lists the registry's rows, the shipped lines only; the
// catalogue-only lines are not registry rows: forced by name through its catalogue, never
// chosen. The tests run them from list_rows() (the kernel list, apart from the registry).
TEST(TernaryApi, CatalogueOnlyRowsAreUnlistedButForcible) {
  std::vector<std::string> listed;
  for (const auto& v : list_variants()) listed.push_back(v.name);
  EXPECT_EQ(listed.size(), registry().variants().size());
  for (const Variant& v : registry().catalogue()) {
    EXPECT_EQ(std::count(listed.begin(), listed.end(), v.name), 0) << v.name;
    EXPECT_EQ(std::count_if(list_rows().begin(), list_rows().end(),
                            [&](const Variant& r) { return std::string(r.name) == v.name; }),
              1)
        << v.name;
    if (v.supported()) {
      EXPECT_EQ(&registry().select(v.name), &v) << v.name;
      EXPECT_NE(&registry().default_variant(), &v) << v.name;
    } else {
      expect_arg_error([&] { registry().select(v.name); }, "variant");
    }
  }
  EXPECT_EQ(registry().variants().size() + registry().catalogue().size(), list_rows().size());
#if defined(__x86_64__)
  EXPECT_EQ(registry().catalogue().size(), 8u);  // avx512_bmi2, avx512_vnni_q2b, avx512_vnni_lut27r16, avx2_q2b, the four *_b3p5
#endif
}

// "avx2_bmi2" was a row (the avx2 kernels with the pext packer): the name still selects avx2,
// whose prepare picks the pext packer where pext is fast.
TEST(TernaryApi, Avx2Bmi2IsAnAliasOfAvx2) {
  for (const auto& v : list_variants()) EXPECT_NE(v.name, "avx2_bmi2");
#if defined(__x86_64__)
  if (!cpu_has(isa::avx2)) GTEST_SKIP() << "no AVX2";
  std::vector<uint32_t> p = {0x2u, 0x4u};
  EXPECT_EQ(prepare(p.data(), 2, 1, 2, nullptr, "avx2_bmi2")->isa, "avx2");
  EXPECT_STREQ(packer_for("lut3r8").name, cpu_has(isa::avx2_bmi2)
                                               ? "ternary_pack_lut3r8__avx2_bmi2"
                                               : "ternary_pack_lut3r8__scalar");
#endif
}
#endif

}  // namespace
}  // namespace cpukern::ternary
