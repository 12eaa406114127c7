// Tests of the widely-linear (Fairy2i) layer: phase quantisation on hand-derived cases,
// every variant of the kernel list against dense(...) @ x in float64, thread/batch/schedule
// invariance, the packers, and argument validation.
// Built twice: over the registry rows (widely_linear_test) and, with CPUKERN_TEST_SIMDE,
// over the SIMDe rows (widely_linear_simde_test, any host).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/cpu_features.h"
#include "kernels/common/errors.h"
#include "kernels/common/isa.h"
#include "kernels/common/limits.h"
#include "kernels/common/ternary_codes.h"
#include "kernels/widely_linear/ukernel.h"
#include "kernels/widely_linear/ukernels/lookup_layout.h"
#include "kernels/widely_linear/widely_linear.h"
#include "tests/cc/common/variant_params.h"
#include "tests/cc/widely_linear/list_rows.h"

namespace cpukern::widely_linear {
namespace {

using ternary_codes::words_for;

// ---------------------------------------------------------------- phase_quantize

TEST(PhaseQuantize, Hand2x2TwoStages) {
  // n = m = 1: a = [[A11, A12], [A21, A22]] = [[3, -1], [1, 1]].
  // U = ((3+1)/2, (1-(-1))/2) = 2 + 1i -> |re| >= |im| -> +1, s_Ure = 2, s_Uim = 0 (none).
  // W = ((3-1)/2, (-1+1)/2) = 1 + 0i -> +1, s_Wre = 1, s_Wim = 0.
  // Stage 2 residuals: U = 0 + 1i -> +i, s_Uim = 1; W = 0 + 0i -> tie, real axis, +1,
  // s_Wre = mean |0| = 0.
  const float a[4] = {3, -1, 1, 1};
  uint32_t planes[8];
  float scales[8];
  phase_quantize(a, 1, 1, 2, planes, scales);
  const uint32_t want_planes[8] = {2, 0, 2, 0, 0, 2, 2, 0};
  const float want_scales[8] = {2, 0, 1, 0, 0, 1, 0, 0};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(planes[i], want_planes[i]) << i;
    EXPECT_EQ(scales[i], want_scales[i]) << i;
  }
  // The two stages reconstruct a exactly.
  float back[4];
  dense(planes, scales, false, 2, 1, 1, 1, back);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back[i], a[i]) << i;
}

TEST(PhaseQuantize, Hand4x4OneStage) {
  // n = m = 2. Chosen U = [[2+.5i, -1+3i], [.5-4i, -3-1i]], W = [[1+1i, -2i], [-2+1i, .5+.25i]];
  // a from A11 = Ure+Wre, A12 = Wim-Uim, A21 = Wim+Uim, A22 = Ure-Wre.
  const float a[16] = {
      3,    -1,   0.5f, -5,     // row 0: A11 | A12
      -1.5, -2.5, 5,    1.25f,  // row 1
      1.5,  1,    1,    -1,     // row 2: A21 | A22
      -3,   -0.75f, 2.5, -3.5,  // row 3
  };
  uint32_t planes[8];
  float scales[4];
  phase_quantize(a, 2, 2, 1, planes, scales);
  // U: +1 (re 2 > .5), +i (3 > 1), -i (4 > .5), -1 (3 > 1). s_Ure = (2+3)/2, s_Uim = (3+4)/2.
  // W: tie |1| = |1| -> +1, -i, -1, +1. s_Wre = (1+2+.5)/3, s_Wim = 2.
  // Codes: +1 at column c -> 2 << 2c, -1 -> 1 << 2c; one word per row.
  const uint32_t want[8] = {
      2, 4,      // U_re: row0 col0 +1; row1 col1 -1
      8, 1,      // U_im: row0 col1 +1; row1 col0 -1
      2, 1 | 8,  // W_re: row0 col0 +1; row1 col0 -1, col1 +1
      4, 0,      // W_im: row0 col1 -1
  };
  for (int i = 0; i < 8; ++i) EXPECT_EQ(planes[i], want[i]) << i;
  EXPECT_EQ(scales[0], 2.5f);
  EXPECT_EQ(scales[1], 3.5f);
  EXPECT_EQ(scales[2], float(3.5 / 3));
  EXPECT_EQ(scales[3], 2.0f);
}

TEST(PhaseQuantize, ResidualStagesReduceError) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const int64_t n = 6, m = 21;
  std::vector<float> a(4 * n * m);
  for (auto& v : a) v = nd(rng);
  double prev = 1e300;
  for (int64_t S = 1; S <= 3; ++S) {
    std::vector<uint32_t> planes(S * 4 * n * words_for(m));
    std::vector<float> scales(S * 4), back(a.size());
    phase_quantize(a.data(), n, m, S, planes.data(), scales.data());
    dense(planes.data(), scales.data(), false, S, n, words_for(m), m, back.data());
    double err = 0;
    for (size_t i = 0; i < a.size(); ++i) err += (a[i] - back[i]) * double(a[i] - back[i]);
    EXPECT_LT(err, prev) << "stages " << S;
    prev = err;
    // Every complex weight maps to exactly one of +-1, +-i per stage: disjoint supports.
    const int64_t pw = n * words_for(m);
    for (int64_t s = 0; s < S; ++s)
      for (int t = 0; t < 2; ++t)
        for (int64_t i = 0; i < pw; ++i) {
          const uint32_t re = planes[(s * 4 + 2 * t) * pw + i];
          const uint32_t im = planes[(s * 4 + 2 * t + 1) * pw + i];
          const uint32_t nz_re = (re | re >> 1) & 0x55555555u, nz_im = (im | im >> 1) & 0x55555555u;
          EXPECT_EQ(nz_re & nz_im, 0u);
          const int64_t c0 = (i % words_for(m)) * 16;
          const int64_t valid = std::min<int64_t>(16, m - c0);
          EXPECT_EQ(__builtin_popcount(nz_re | nz_im), valid);
        }
  }
}

void expect_arg_error(const std::function<void()>& f, const std::string& arg) {
  try {
    f();
    ADD_FAILURE() << "no error, expected one naming '" << arg << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(arg + ":", 0), 0u) << e.what();
  }
}

TEST(PhaseQuantize, Errors) {
  std::vector<float> a(16, 1.0f);
  uint32_t planes[16];
  float scales[8];
  a[5] = std::numeric_limits<float>::quiet_NaN();
  expect_arg_error([&] { phase_quantize(a.data(), 2, 2, 1, planes, scales); }, "a");
  a[5] = 1;
  expect_arg_error([&] { phase_quantize(a.data(), 2, 2, 0, planes, scales); }, "stages");
  expect_arg_error([&] { phase_quantize(a.data(), 2, 0, 1, planes, scales); }, "m");
}

// ---------------------------------------------------------------- variants

struct Layer {
  int64_t S, n, m, words;
  bool per_row;
  std::vector<uint32_t> planes;
  std::vector<float> scales;
};

Layer random_layer(std::mt19937& rng, int64_t S, int64_t n, int64_t m, bool per_row,
                   bool disjoint) {
  Layer L{S, n, m, words_for(m), per_row, {}, {}};
  L.planes.assign(S * 4 * n * L.words, 0);
  std::uniform_int_distribution<int> code(0, 2), five(0, 4);
  const int64_t pw = n * L.words;
  for (int64_t s = 0; s < S; ++s)
    for (int t = 0; t < 2; ++t)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < m; ++c) {
          int cre, cim;  // codes 0, 1 (-1), 2 (+1)
          if (disjoint) {
            const int v = five(rng);  // 0, +1, -1, +i, -i
            cre = v == 1 ? 2 : v == 2 ? 1 : 0;
            cim = v == 3 ? 2 : v == 4 ? 1 : 0;
          } else {
            cre = code(rng);
            cim = code(rng);
          }
          const int64_t wi = r * L.words + c / 16;
          L.planes[(s * 4 + 2 * t) * pw + wi] |= uint32_t(cre) << (2 * (c % 16));
          L.planes[(s * 4 + 2 * t + 1) * pw + wi] |= uint32_t(cim) << (2 * (c % 16));
        }
  std::uniform_real_distribution<float> sc(-2.0f, 2.0f);
  L.scales.resize(S * 4 * (per_row ? n : 1));
  for (auto& v : L.scales) v = sc(rng);
  return L;
}

class VariantTest : public ::testing::TestWithParam<std::string> {
 protected:
  const Variant& variant() const {
    return *cpukern::testing::find_test_variant(list_rows(), simde_variants(), GetParam());
  }
  std::shared_ptr<const PreparedLayer> prep(const Layer& L, int64_t words, int64_t m,
                                            int64_t S) const {
    return prepare_with(variant(), L.planes.data(), L.scales.data(), L.per_row, S, L.n, words,
                        m);
  }
  std::shared_ptr<const PreparedLayer> prep(const Layer& L) const {
    return prep(L, L.words, L.m, L.S);
  }
  void SetUp() override {
    ASSERT_NE(cpukern::testing::find_test_variant(list_rows(), simde_variants(), GetParam()),
              nullptr);
    CPUKERN_SKIP_IF_UNSUPPORTED(variant());
  }
};

TEST_P(VariantTest, MatchesDenseAndIsDeterministic) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd;
  struct Shape {
    int64_t n, m;
  };
  const Shape shapes[] = {{1, 1}, {1, 17}, {3, 33}, {5, 7}, {2, 16}, {9, 5}, {13, 48}, {6, 100}};
  int cases = 0;
  for (const Shape sh : shapes)
    for (int64_t S = 1; S <= 3; ++S)
      for (int per_row = 0; per_row < 2; ++per_row) {
        const Layer L = random_layer(rng, S, sh.n, sh.m, per_row, (cases & 1) == 0);
        auto layer = prep(L);
        ASSERT_EQ(layer->isa, GetParam());
        std::vector<float> a(4 * sh.n * sh.m);
        dense(L.planes.data(), L.scales.data(), L.per_row, S, sh.n, L.words, sh.m, a.data());
        // Batch groups of the ukernels: 1, 2, 3, 4 rows; 4 + 1; 4 * 4.
        for (int64_t B : {int64_t(1), int64_t(2), int64_t(3), int64_t(5), int64_t(16)}) {
          std::vector<float> x(B * 2 * sh.m);
          for (auto& v : x) v = nd(rng);
          std::vector<float> y_ref;
          for (int fused = 1; fused >= 0; --fused)
            for (int threads : {1, 2, 3}) {
              std::vector<float> y(B * 2 * sh.n, std::numeric_limits<float>::quiet_NaN());
              run(*layer, x.data(), B, fused, threads, y.data());
              if (y_ref.empty()) {
                y_ref = y;
                for (int64_t b = 0; b < B; ++b)
                  for (int64_t r = 0; r < 2 * sh.n; ++r) {
                    double want = 0, mag = 0;
                    for (int64_t c = 0; c < 2 * sh.m; ++c) {
                      const double t = double(a[r * 2 * sh.m + c]) * x[b * 2 * sh.m + c];
                      want += t;
                      mag += std::fabs(t);
                    }
                    ASSERT_NEAR(y[b * 2 * sh.n + r], want, 1e-5 * mag + 1e-30)
                        << "n=" << sh.n << " m=" << sh.m << " S=" << S << " per_row=" << per_row
                        << " B=" << B << " b=" << b << " row=" << r;
                  }
              } else {
                for (size_t i = 0; i < y.size(); ++i)
                  ASSERT_EQ(y[i], y_ref[i]) << "fused=" << fused << " threads=" << threads
                                            << " n=" << sh.n << " m=" << sh.m << " S=" << S
                                            << " B=" << B << " i=" << i;
              }
            }
          // Every batch row gives the same result alone as inside a batch.
          if (B > 1)
            for (int64_t b = 0; b < B; ++b) {
              std::vector<float> y1(2 * sh.n);
              run(*layer, x.data() + b * 2 * sh.m, 1, b & 1, 1, y1.data());
              for (int64_t r = 0; r < 2 * sh.n; ++r)
                ASSERT_EQ(y1[r], y_ref[b * 2 * sh.n + r]) << "B=" << B << " b=" << b;
            }
        }
        ++cases;
      }
}

// Larger layers: several row tasks and passes of the batched kernel (signed_impl.h),
// column blocks with a tail; fused (batched) == unfused == each row alone, bitwise, for
// every thread count.
TEST_P(VariantTest, BatchedKernelBitwise) {
  std::mt19937 rng(77);
  std::normal_distribution<float> nd;
  for (const auto& nm : {std::pair<int64_t, int64_t>{600, 200}, {37, 1000}}) {
    const Layer L = random_layer(rng, 2, nm.first, nm.second, true, true);
    auto layer = prep(L);
    for (int64_t B : {int64_t(4), int64_t(7)}) {
      std::vector<float> x(B * 2 * L.m);
      for (auto& v : x) v = nd(rng);
      std::vector<float> ref(B * 2 * L.n);
      run(*layer, x.data(), B, false, 1, ref.data());
      for (int threads : {1, 2, 3}) {
        std::vector<float> y(B * 2 * L.n);
        run(*layer, x.data(), B, true, threads, y.data());
        ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4)) << "threads " << threads;
      }
      std::vector<float> y1(2 * L.n);
      run(*layer, x.data() + (B - 1) * 2 * L.m, 1, true, 2, y1.data());
      ASSERT_EQ(0, std::memcmp(y1.data(), ref.data() + (B - 1) * 2 * L.n, y1.size() * 4));
    }
  }
}

// Activations near fp32's max with small scales (exact results finite): the dot products
// used to overflow to inf; the pre-scaled rows (prescale.h) give finite results within the
// fp32 bound, and fused, batched, unfused and single-row runs agree bitwise.
TEST_P(VariantTest, HugeActivationsGiveFiniteResults) {
  std::mt19937 rng(31337);
  std::normal_distribution<float> nd;
  for (int64_t S : {int64_t(1), int64_t(2)}) {
    const int64_t n = 40, m = 300, B = 5;
    Layer L = random_layer(rng, S, n, m, true, true);
    for (auto& v : L.scales) v /= float(4 * m);
    auto layer = prep(L);
    std::vector<float> a(4 * n * m);
    dense(L.planes.data(), L.scales.data(), L.per_row, S, n, L.words, m, a.data());
    std::vector<float> x(B * 2 * m);
    const float mags[B] = {1.0f, 1e37f, 1e38f, 1e-3f, 5e37f};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < 2 * m; ++c)
        x[b * 2 * m + c] = std::max(-3.0f, std::min(3.0f, nd(rng))) * mags[b];
    std::vector<float> ref(B * 2 * n);
    run(*layer, x.data(), B, false, 1, ref.data());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = 0; r < 2 * n; ++r) {
        double want = 0, mag = 0;
        for (int64_t c = 0; c < 2 * m; ++c) {
          const double t = double(a[r * 2 * m + c]) * x[b * 2 * m + c];
          want += t, mag += std::fabs(t);
        }
        const float got = ref[b * 2 * n + r];
        ASSERT_TRUE(std::isfinite(got)) << "S=" << S << " b=" << b << " r=" << r << ": " << got;
        ASSERT_NEAR(got, want, 1e-5 * mag + 1e-30) << "S=" << S << " b=" << b << " r=" << r;
      }
    for (int threads : {1, 3}) {
      std::vector<float> y(ref.size());
      run(*layer, x.data(), B, true, threads, y.data());
      ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4)) << "threads " << threads;
    }
    for (int64_t b = 0; b < B; ++b) {
      std::vector<float> y1(2 * n);
      run(*layer, x.data() + b * 2 * m, 1, true, 1, y1.data());
      ASSERT_EQ(0, std::memcmp(y1.data(), ref.data() + b * 2 * n, y1.size() * 4)) << "b=" << b;
    }
  }
}

TEST_P(VariantTest, Errors) {
  std::mt19937 rng(5);
  Layer L = random_layer(rng, 2, 3, 20, false, true);
  auto P = [&](const Layer& l, int64_t words, int64_t m, int64_t S) {
    return [&, words, m, S] { prep(l, words, m, S); };
  };
  expect_arg_error(P(L, 1, 20, 2), "planes");   // words != ceil(m/16)
  expect_arg_error(P(L, 2, 0, 2), "m");
  expect_arg_error(P(L, 2, 20, 0), "stages");
  Layer bad = L;
  bad.planes[5] |= 3u << 6;  // code 0b11
  expect_arg_error(P(bad, 2, 20, 2), "planes");
  bad = L;
  bad.planes[1] |= 2u << (2 * 4);  // column 20 of row 0: past m
  expect_arg_error(P(bad, 2, 20, 2), "planes");
  bad = L;
  bad.scales[3] = std::numeric_limits<float>::infinity();
  expect_arg_error(P(bad, 2, 20, 2), "scales");

  auto layer = prep(L);
  std::vector<float> x(2 * 20, 1.0f), y(2 * 3, 42.0f);
  expect_arg_error([&] { run(*layer, x.data(), 1, true, -1, y.data()); }, "threads");
  expect_arg_error([&] { run(*layer, x.data(), 1, true, limits::kMaxThreads + 1, y.data()); },
                   "threads");
  expect_arg_error([&] { run(*layer, nullptr, 1, true, 1, y.data()); }, "x");
  expect_arg_error([&] { run(*layer, x.data(), -1, true, 1, y.data()); }, "x");
  for (float v : y) EXPECT_EQ(v, 42.0f);  // nothing written
}

INSTANTIATE_TEST_SUITE_P(All, VariantTest,
                         ::testing::ValuesIn(cpukern::testing::test_variant_names(
                             list_rows(), simde_variants())),
                         [](const auto& info) { return info.param; });

#if !defined(CPUKERN_TEST_SIMDE)
// Through the public prepare(): the layer records the registry's row of that name (a shipped
// row or one of its catalogue), the list line's kernels, and its packer.
TEST_P(VariantTest, PrepareByName) {
  std::mt19937 rng(3);
  const Layer L = random_layer(rng, 1, 5, 40, false, true);
  auto layer = prepare(L.planes.data(), L.scales.data(), false, 1, L.n, L.words, L.m, GetParam());
  EXPECT_EQ(layer->variant, registry().named(GetParam()));
  EXPECT_EQ(layer->variant->ukernel.fused, variant().ukernel.fused);
  EXPECT_EQ(layer->variant->ukernel.fused_batch, variant().ukernel.fused_batch);
  EXPECT_EQ(layer->isa, GetParam());
  EXPECT_EQ(layer->packer, packer_for(*variant().ukernel.layout).name);
}
#endif

#if !defined(CPUKERN_TEST_SIMDE)
// The bytes of `layout` built directly, column by column (lookup layouts), or the public
// planes themselves (t2p16x4).
std::vector<uint32_t> expected_layout(const Layout& layout, const Layer& L, const Dims& d) {
  if (std::string(layout.name) == "t2p16x4") return L.planes;
  const lookup::Geometry q = std::string(layout.name) == "g3r8x4" ? lookup::kG3R8 : lookup::kG4R16;
  std::vector<uint32_t> want(layout.packed_size(d) / 4, 0);
  const int64_t T = q.tiles(d), C = q.chunks(d);
  for (int64_t s = 0; s < d.stages; ++s)
    for (int p = 0; p < 4; ++p)
      for (int64_t r = 0; r < d.n; ++r)
        for (int64_t c = 0; c < d.m; ++c) {
          const int v =
              ternary_codes::decode(L.planes[((s * 4 + p) * d.n + r) * d.words + c / 16], c % 16);
          if (!v) continue;
          const int64_t g = c / q.G;
          const int shift = int(q.G * (g % q.K) + c % q.G) + (v < 0 ? q.neg_shift : 0);
          want[(((s * T + r / q.R) * C + g / q.K) * 4 + p) * q.R + r % q.R] |= 1u << shift;
        }
  return want;
}

// Every packer of the kernel list (e.g. g3r8x4's portable and pext packers) writes the
// bytes of a direct per-column construction, so all packers of a layout agree.
TEST(Packers, AllWriteTheLayout) {
  std::mt19937 rng(99);
  int checked = 0;
  for (const Packer& p : packers()) {
    if (!p.supported()) {
      std::cout << "skipped packer " << p.name << ": needs " << joined(missing_features(p.required))
                << "\n";
      continue;
    }
    for (int64_t m : {1, 15, 16, 17, 31, 45, 100})
      for (int64_t n : {1, 11, 17}) {
        const Layer L = random_layer(rng, 2, n, m, false, false);
        const Dims d{2, n, m, L.words};
        std::vector<uint32_t> got(p.layout->packed_size(d) / 4, 0);
        p.pack(L.planes.data(), d, got.data());
        ASSERT_EQ(got, expected_layout(*p.layout, L, d)) << p.name << " n " << n << " m " << m;
      }
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

// prepare() uses, per layout, the supported packer with the most features.
TEST(Packers, PrepareChoosesTheFastestSupported) {
  for (const Packer& p : packers()) {
    const Packer& chosen = packer_for(*p.layout);
    EXPECT_TRUE(chosen.supported());
    EXPECT_EQ(chosen.layout, p.layout);
    if (p.supported()) {
      EXPECT_GE(__builtin_popcountll(chosen.required), __builtin_popcountll(p.required))
          << p.name << " vs " << chosen.name;
    }
  }
#if defined(__x86_64__)
  EXPECT_STREQ(packer_for(layouts::g3r8x4).name,
               cpu_has(isa::avx2_bmi2) ? "widely_linear_pack_g3r8x4__avx2_bmi2"
                                       : "widely_linear_pack_g3r8x4__scalar");
#endif
}

TEST(Registry, TableAndSelection) {
  const auto vs = list_variants();
  ASSERT_FALSE(vs.empty());
  EXPECT_EQ(vs[0].name, "reference");
  int selected = 0;
  std::map<std::string, int> prio;
  for (const auto& v : vs) {
    selected += v.selected;
    prio[v.name] = v.priority;
    EXPECT_NE(v.ukernel.find("widely_linear_f32_f32_"), std::string::npos);
  }
  EXPECT_EQ(prio.size(), vs.size());  // names are unique
  EXPECT_EQ(selected, 1);
  expect_arg_error([] { registry().select("no_such_isa"); }, "variant");
#if defined(__x86_64__)
  // Priorities from the speed measured on Zen 5 (ukernels.inc): avx512 > avx2 > reference.
  EXPECT_GT(prio.at("avx512"), prio.at("avx2"));
  EXPECT_GT(prio.at("avx2"), prio.at("reference"));
  EXPECT_EQ(prio.count("avx2_bmi2"), 0u);  // its pext packer is now a packer of avx2
  // The paper's pext kernel is catalogue only: not listed, never the default, forced by name.
  EXPECT_EQ(prio.count("avx512_bmi2"), 0u);
  if (cpu_has(isa::avx512_bmi2)) {
    EXPECT_STREQ(registry().select("avx512_bmi2").name, "avx512_bmi2");
    EXPECT_EQ(&registry().select("avx512_bmi2"), &registry().catalogue().at(0));
  }
  for (const auto& v : vs) {
    if (v.name == "avx512") {
      EXPECT_EQ(v.required, std::vector<std::string>{"avx512f"});
    }
  }
  // The old name still selects the avx2 row (where the CPU runs it).
  if (cpu_has(isa::avx2)) {
    EXPECT_STREQ(registry().select("avx2_bmi2").name, "avx2");
  }
#elif defined(__aarch64__)
  // AArch64: the NEON row (ARMv8.0 baseline, every AArch64 CPU) is the default.
  EXPECT_GT(prio.at("neon"), prio.at("reference"));
  for (const auto& v : vs) {
    if (v.name == "neon") {
      if (!std::getenv("CPUKERN_VARIANT")) {
        EXPECT_TRUE(v.selected);
      }
      EXPECT_EQ(v.required, std::vector<std::string>{"neon"});
    }
  }
#endif
}
#endif  // !CPUKERN_TEST_SIMDE

}  // namespace
}  // namespace cpukern::widely_linear
