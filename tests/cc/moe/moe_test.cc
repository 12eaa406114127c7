// Fused MoE: every registry variant this CPU runs (the others skip with the reason) against an
// independent float64 model written here, over a table of shapes, activations, biases and
// routings; thread counts 1, 2, 3 must agree bit for bit, and so must batch splits (the whole
// batch, each token alone, random chunks; both weight formats). Plus the router, validation,
// and the micro-kernels: accumulate and overwrite modes across K blocks, and the row placement
// of every tile height.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/bf16.h"
#include "kernels/common/cpu_features.h"
#include "kernels/common/errors.h"
#include "kernels/common/kernel_list.h"
#include "kernels/moe/int8.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernel.h"
#include "kernels/moe/ukernels/ukernels.h"
#include "tests/cc/common/variant_params.h"
#include "tests/cc/moe/list_rows.h"

namespace cpukern::moe {
namespace {

using cpukern::testing::find_test_variant;

// The variants under test: the kernel list's rows (ukernels/ukernels.inc).
std::vector<std::string> variant_names() {
  return cpukern::testing::test_variant_names(list_rows(), simde_variants());
}

const Variant& test_variant(const std::string& name) {
  const Variant* v = find_test_variant(list_rows(), simde_variants(), name);
  if (!v) throw std::runtime_error("no variant " + name);
  return *v;
}

// The GEMMs a ukernel runs: itself and, for a row with AMX tiles, the tile GEMM its large
// calls run on the same packed weights (ukernel.h ukernel_for_call).
std::vector<const Ukernel*> gemms_of(const Ukernel& u) {
  std::vector<const Ukernel*> g = {&u};
  if (u.tiles) g.push_back(u.tiles);
  return g;
}

std::vector<bf16_t> random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<bf16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

struct Case {
  int64_t e, topk, h, i, t;
  Activation act;
  bool bias, skip_weighted, repeated_ids, sparse;
  float wscale = 1.0f;  // > 1 drives swigluoai into its clamps
};

std::string act_name(Activation a) {
  switch (a) {
    case Activation::kSilu: return "silu";
    case Activation::kGelu: return "gelu";
    case Activation::kGeluTanh: return "gelu_tanh";
    default: return "swigluoai";
  }
}

std::string case_name(const Case& c) {
  return "E" + std::to_string(c.e) + "_k" + std::to_string(c.topk) + "_H" + std::to_string(c.h) +
         "_I" + std::to_string(c.i) + "_T" + std::to_string(c.t) + "_" + act_name(c.act) +
         (c.bias ? "_bias" : "") + (c.skip_weighted ? "_skipw" : "") +
         (c.repeated_ids ? "_rep" : "") + (c.sparse ? "_sparse" : "") +
         (c.wscale != 1.0f ? "_big" : "");
}

std::vector<Case> cases() {
  std::vector<Case> cs;
  const Activation acts[] = {Activation::kSilu, Activation::kGelu, Activation::kGeluTanh,
                             Activation::kSwigluOai};
  const int64_t dims[] = {1, 31, 32, 128, 176};
  const int64_t es[] = {1, 8, 32};
  const int64_t ks[] = {1, 2, 4, 8};
  const int64_t ts[] = {0, 1, 7, 64};
  // Every H x I pair once, the other axes rotating through their values.
  int n = 0;
  for (int64_t h : dims)
    for (int64_t i : dims) {
      const int64_t e = es[n % 3];
      int64_t k = ks[(n / 3) % 4];
      while (k > e) k /= 2;
      int64_t t = ts[(n / 2) % 4];
      if (h * i >= 128 * 128 && t == 64) t = 7;  // keep the scalar oracle quick under QEMU
      cs.push_back({e, k, h, i, t, acts[n % 4], (n / 4) % 2 == 0, false, false, false});
      ++n;
    }
  // Every activation with and without bias on a mid shape with many tokens.
  for (Activation a : acts)
    for (bool b : {false, true}) cs.push_back({8, 4, 32, 31, 64, a, b, false, false, false});
  // skip_weighted (topk 1), repeated ids in a row, experts with no tokens, clamps.
  cs.push_back({8, 1, 31, 32, 7, Activation::kSilu, true, true, false, false});
  cs.push_back({32, 1, 128, 32, 64, Activation::kSwigluOai, false, true, false, false});
  cs.push_back({8, 4, 31, 176, 7, Activation::kGeluTanh, true, false, true, false});
  cs.push_back({8, 8, 32, 31, 7, Activation::kSwigluOai, true, false, true, false});
  cs.push_back({32, 2, 128, 31, 7, Activation::kGelu, false, false, false, true});
  cs.push_back({32, 4, 32, 32, 64, Activation::kSwigluOai, true, false, false, true, 8.0f});
  cs.push_back({8, 2, 31, 31, 7, Activation::kSwigluOai, true, false, false, false, 8.0f});
  // One real-width case (gpt-oss hidden size, a tensor-parallel shard of I).
  cs.push_back({2, 2, 2880, 176, 2, Activation::kSwigluOai, true, false, false, false});
  // K past one K block (kernels block K for experts with several row blocks): 16 rows per
  // expert, K = 640 and 288 (partial last block).
  cs.push_back({2, 2, 640, 288, 16, Activation::kSwigluOai, true, false, false, false});
  cs.push_back({2, 2, 288, 640, 16, Activation::kSilu, false, false, false, false});
  return cs;
}

struct Problem {
  Case c;
  std::vector<bf16_t> x, w13, w2, b13, b2;
  std::vector<float> weights;
  std::vector<int32_t> ids;
};

Problem make_problem(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p;
  p.c = c;
  p.x = random_bf16(size_t(c.t * c.h), 1.0f, rng);
  p.w13 = random_bf16(size_t(c.e * 2 * c.i * c.h), c.wscale * 1.7f / std::sqrt(float(c.h)), rng);
  p.w2 = random_bf16(size_t(c.e * c.h * c.i), 1.7f / std::sqrt(float(c.i)), rng);
  if (c.bias) {
    p.b13 = random_bf16(size_t(c.e * 2 * c.i), 0.5f, rng);
    p.b2 = random_bf16(size_t(c.e * c.h), 0.5f, rng);
  }
  std::uniform_real_distribution<float> wd(0.05f, 1.0f);
  std::vector<int32_t> perm(size_t(c.e));
  for (int64_t tok = 0; tok < c.t; ++tok) {
    for (int64_t x = 0; x < c.e; ++x) perm[x] = int32_t(x);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t j = 0; j < c.topk; ++j) {
      int32_t id = perm[j];
      if (c.repeated_ids && j % 2 == 1) id = p.ids.back();  // same expert twice in a row
      if (c.sparse) id = (j % 2 == 0) ? 0 : int32_t(c.e - 1);
      p.ids.push_back(id);
      p.weights.push_back(c.skip_weighted ? 1.0f : wd(rng));
    }
  }
  return p;
}

double model_act(Activation a, double g, double u) {
  switch (a) {
    case Activation::kSilu: return u * g / (1.0 + std::exp(-g));
    case Activation::kGelu: return u * 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return u * 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    default: {
      g = std::min(g, 7.0);
      u = std::max(std::min(u, 7.0), -7.0);
      return (u + 1.0) * g / (1.0 + std::exp(-1.702 * g));
    }
  }
}

// The float64 model: per (token, slot) the expert's two linears, the activation rounded to
// bf16 as the op specifies, the weighted sum in float64.
std::vector<double> model(const Problem& p) {
  const Case& c = p.c;
  std::vector<double> out(size_t(c.t * c.h), 0.0);
  std::vector<double> a(size_t(c.i));
  for (int64_t tok = 0; tok < c.t; ++tok)
    for (int64_t j = 0; j < c.topk; ++j) {
      const int64_t ex = p.ids[tok * c.topk + j];
      const double wt = p.weights[tok * c.topk + j];
      const bf16_t* w13 = p.w13.data() + ex * 2 * c.i * c.h;
      const bf16_t* xr = p.x.data() + tok * c.h;
      for (int64_t q = 0; q < c.i; ++q) {
        const bool il = c.act == Activation::kSwigluOai;
        const int64_t rg = il ? 2 * q : q, ru = il ? 2 * q + 1 : c.i + q;
        double g = 0, u = 0;
        for (int64_t k = 0; k < c.h; ++k) {
          g += double(bf16_to_f32(w13[rg * c.h + k])) * bf16_to_f32(xr[k]);
          u += double(bf16_to_f32(w13[ru * c.h + k])) * bf16_to_f32(xr[k]);
        }
        if (c.bias) {
          g += bf16_to_f32(p.b13[ex * 2 * c.i + rg]);
          u += bf16_to_f32(p.b13[ex * 2 * c.i + ru]);
        }
        a[q] = bf16_to_f32(f32_to_bf16(float(model_act(c.act, g, u))));
      }
      const bf16_t* w2 = p.w2.data() + ex * c.h * c.i;
      for (int64_t o = 0; o < c.h; ++o) {
        double y = 0;
        for (int64_t q = 0; q < c.i; ++q) y += double(bf16_to_f32(w2[o * c.i + q])) * a[q];
        if (c.bias) y += bf16_to_f32(p.b2[ex * c.h + o]);
        out[tok * c.h + o] += wt * y;
      }
    }
  return out;
}

std::vector<bf16_t> run(const Problem& p, const std::string& isa, int threads) {
  const Case& c = p.c;
  auto w13 = prepare(p.w13.data(), c.e, 2 * c.i, c.h, test_variant(isa));
  auto w2 = prepare(p.w2.data(), c.e, c.h, c.i, test_variant(isa));
  EXPECT_EQ(w13->isa, isa);
  std::vector<bf16_t> out(size_t(c.t * c.h) + 1, 0x7fc1);  // +1 sentinel past the end
  fused_moe(p.x.data(), c.t, c.h, *w13, *w2, p.weights.data(), p.ids.data(), c.topk, c.act,
            c.bias ? p.b13.data() : nullptr, c.bias ? p.b2.data() : nullptr, c.skip_weighted,
            threads, out.data());
  EXPECT_EQ(out.back(), 0x7fc1) << "wrote past the output";
  out.pop_back();
  return out;
}

struct Param {
  std::string variant;
  Case c;
};

class MoeVariantTest : public ::testing::TestWithParam<Param> {};

TEST_P(MoeVariantTest, MatchesFloat64ModelAndIsThreadInvariant) {
  const Param& prm = GetParam();
  CPUKERN_SKIP_IF_UNSUPPORTED(test_variant(prm.variant));
  const Problem p = make_problem(prm.c, 1234u + uint32_t(prm.c.h * 7 + prm.c.i));
  const std::vector<bf16_t> got = run(p, prm.variant, 1);
  const std::vector<double> want = model(p);
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t q = 0; q < got.size(); ++q) {
    const double g = bf16_to_f32(got[q]), w = want[q];
    if (!(std::fabs(g - w) <= 1e-3 + 1.6e-2 * std::fabs(w))) {
      if (++bad <= 5)
        ADD_FAILURE() << "out[" << q / prm.c.h << "][" << q % prm.c.h << "] = " << g
                      << ", float64 model " << w;
    }
  }
  EXPECT_EQ(bad, 0);
  for (int th : {2, 3}) {
    const std::vector<bf16_t> again = run(p, prm.variant, th);
    EXPECT_EQ(0, std::memcmp(again.data(), got.data(), got.size() * 2))
        << "threads=" << th << " differs from threads=1";
  }
}

std::vector<Param> params() {
  std::vector<Param> ps;
  for (const auto& v : variant_names())
    for (const auto& c : cases()) ps.push_back({v, c});
  return ps;
}

INSTANTIATE_TEST_SUITE_P(All, MoeVariantTest, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.variant + "_" + case_name(info.param.c);
                         });

// Each variant vs the reference variant (the oracle) on one mid-size case.
class MoeVsReference : public ::testing::TestWithParam<std::string> {};
TEST_P(MoeVsReference, AgreesWithReference) {
  CPUKERN_SKIP_IF_UNSUPPORTED(test_variant(GetParam()));
  for (Activation a : {Activation::kSilu, Activation::kSwigluOai}) {
    const Problem p = make_problem({8, 4, 176, 176, 7, a, true, false, false, false}, 99u);
    const auto got = run(p, GetParam(), 2), ref = run(p, "reference", 1);
    for (size_t q = 0; q < got.size(); ++q) {
      const double g = bf16_to_f32(got[q]), r = bf16_to_f32(ref[q]);
      ASSERT_LE(std::fabs(g - r), 1e-3 + 1.6e-2 * std::fabs(r)) << "at " << q;
    }
  }
}
INSTANTIATE_TEST_SUITE_P(All, MoeVsReference, ::testing::ValuesIn(variant_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// The micro-kernel itself: ragged shapes, a sub-range of panels, accumulate mode.
class MoeUkernelTest : public ::testing::TestWithParam<std::string> {};
TEST_P(MoeUkernelTest, GemmPanelsAndAccumulate) {
  const Variant& v = test_variant(GetParam());
  CPUKERN_SKIP_IF_UNSUPPORTED(v);
  std::mt19937 rng(7);
  // 301: past one K block, a partial last block; o 37 and 61 from panel 1: 2 and 3 panels
  // (even and odd counts at NR = 16; tiles that take 2 panels per call get a 1-panel tail).
  for (const Ukernel* g : gemms_of(v.ukernel.bf16()))
  for (int64_t o : {37, 61})
  for (int64_t k : {45, 301})
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 17}) {
    const Ukernel& uk = *g;
    auto w = random_bf16(size_t(o * k), 1.0f, rng);
    auto a = random_bf16(size_t(m * k), 1.0f, rng);
    std::vector<char> wp(size_t(uk.packed_size(o, k)));
    uk.pack({w.data()}, o, k, wp.data());
    std::vector<char> ap(size_t(uk.packed_a_size(m, k)) + 64);
    uk.pack_a(a.data(), k, nullptr, m, k, ap.data());
    const int64_t p0 = 1, p1 = (o + uk.nr - 1) / uk.nr, ldc = (p1 - p0) * uk.nr + 3;
    // accumulate=false must overwrite whatever C holds (garbage, even NaN), also in the K
    // blocks after the first; accumulate=true must add to C (0.5).
    for (bool acc : {false, true}) {
      std::vector<float> cbuf(size_t(m * ldc), acc ? 0.5f : std::nanf(""));
      for (size_t q = 0; !acc && q < cbuf.size(); q += 3) cbuf[q] = 1e30f;
      uk.gemm(ap.data(), m, k, wp.data(), p0, p1, cbuf.data(), ldc, acc);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t col = p0 * uk.nr; col < p1 * uk.nr; ++col) {
          double s = acc ? 0.5 : 0.0;
          if (col < o)
            for (int64_t q = 0; q < k; ++q)
              s += double(bf16_to_f32(a[r * k + q])) * bf16_to_f32(w[col * k + q]);
          ASSERT_NEAR(cbuf[r * ldc + col - p0 * uk.nr], s, 1e-4 * (1 + std::fabs(s)))
              << "m=" << m << " k=" << k << " r=" << r << " col=" << col << " accumulate=" << acc;
        }
    }
  }
}

// Row placement, explicit for every tile height: row r of A is one-hot at k = pos(r) with the
// value 1, so C[r][col] must be exactly W[col][pos(r)], the weight of that row's own k; a row
// written to another row's place (a BFMMLA row-pair swap, a wrong row stride), a row dropped or
// one past m written is named. m = 1..2 MR + 1: every tile<M> (M = 1..MR) alone and in the
// blocked loop; K 64 (one block) and 320 (K blocks). Both formats (MXFP4 weights: e2m1 codes
// at scale 127, exact in bf16).
TEST_P(MoeUkernelTest, EveryTileHeightPlacesEachRowExactly) {
  const Variant& v = test_variant(GetParam());
  CPUKERN_SKIP_IF_UNSUPPORTED(v);
  std::mt19937 rng(13);
  for (WeightFormat f : {WeightFormat::kBf16, WeightFormat::kMxfp4})
  for (const Ukernel* g : gemms_of(ukernel_for(v, f))) {
    const Ukernel& uk = *g;
    for (int64_t k : {64, 320}) {
      const int64_t o = 3 * uk.nr + 5;  // ragged last panel
      // Distinct weights: random e2m1 codes, scale 127 (values +-0.5 .. +-6, exact).
      std::vector<uint8_t> blocks(size_t(o * k / 2)), scales(size_t(o * k / 32), 127);
      for (auto& b : blocks) b = uint8_t(rng());
      std::vector<bf16_t> w(size_t(o * k));
      mxfp4::dequantize(blocks.data(), scales.data(), o, k, w.data());
      std::vector<char> wp(size_t(uk.packed_size(o, k)));
      if (f == WeightFormat::kMxfp4)
        uk.pack({blocks.data(), scales.data()}, o, k, wp.data());
      else
        uk.pack({w.data()}, o, k, wp.data());
      for (int64_t m = 1; m <= 2 * uk.mr + 1; ++m) {
        auto pos = [&](int64_t r) { return (r * 37 + 11) % k; };  // distinct for r < k / gcd
        std::vector<bf16_t> a(size_t(m * k), 0);
        for (int64_t r = 0; r < m; ++r) a[r * k + pos(r)] = f32_to_bf16(1.0f);
        std::vector<char> ap(size_t(uk.packed_a_size(m, k)) + 64);
        uk.pack_a(a.data(), k, nullptr, m, k, ap.data());
        const int64_t p1 = (o + uk.nr - 1) / uk.nr, ldc = p1 * uk.nr + 1;
        std::vector<float> c(size_t((m + 1) * ldc), -777.0f);  // one row past m: untouched
        uk.gemm(ap.data(), m, k, wp.data(), 0, p1, c.data(), ldc, false);
        for (int64_t r = 0; r < m; ++r)
          for (int64_t col = 0; col < p1 * uk.nr; ++col) {
            const float want = col < o ? bf16_to_f32(w[col * k + pos(r)]) : 0.0f;
            const float got = c[r * ldc + col];
            if (got == want) continue;
            int64_t from = -1;  // which row's value landed here, if any
            for (int64_t r2 = 0; r2 < m && col < o && got != 0.0f; ++r2)
              if (r2 != r && got == bf16_to_f32(w[col * k + pos(r2)])) from = r2;
            FAIL() << uk.name << " m=" << m << " k=" << k << ": C[" << r << "][" << col
                   << "] = " << got << ", want " << want
                   << (from >= 0 ? " (row " + std::to_string(from) + "'s value)" : "");
          }
        for (int64_t col = 0; col < ldc; ++col)
          ASSERT_EQ(c[m * ldc + col], -777.0f) << uk.name << " m=" << m << ": wrote row m";
        for (int64_t r = 0; r < m; ++r)
          ASSERT_EQ(c[r * ldc + ldc - 1], -777.0f) << uk.name << " m=" << m << ": wrote past ldc";
      }
    }
  }
}
INSTANTIATE_TEST_SUITE_P(All, MoeUkernelTest, ::testing::ValuesIn(variant_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(MoeRegistry, NamesAndDefault) {
  const auto vs = list_variants();
  ASSERT_FALSE(vs.empty());
  int selected = 0, best = -1;
  bool has_ref = false;
  for (const auto& v : vs) {
    selected += v.selected;
    has_ref |= v.name == "reference";
    if (v.supported) best = std::max(best, v.priority);
    EXPECT_EQ(v.ukernel.rfind("moe_gemm_f32_", 0), 0u) << v.ukernel;
    EXPECT_NE(v.ukernel.find("__"), std::string::npos) << v.ukernel;
  }
  EXPECT_EQ(selected, 1);
  EXPECT_TRUE(has_ref);
  // The default is the highest-priority row this CPU runs (unless CPUKERN_VARIANT forces one).
  for (const auto& v : vs) {
    if (v.selected && !std::getenv("CPUKERN_VARIANT")) {
      EXPECT_EQ(v.priority, best) << v.name;
    }
  }
}

// The QEMU legs' CPU models select the AArch64 row their features call for: -cpu max (BF16,
// I8MM) the BFMMLA/SMMLA row, neoverse-n1 (dotprod only) the SDOT row, cortex-a72 (ARMv8.0)
// plain neon.
TEST(MoeRegistry, QemuModelSelectsItsRow) {
  const char* model = std::getenv("CPUKERN_QEMU_CPU");
  if (!model || std::getenv("CPUKERN_VARIANT")) GTEST_SKIP() << "not under qemu-user, or forced";
#if defined(__aarch64__)
  const std::string want = std::string(model) == "max"           ? "neon_bf16_bfmmla"
                           : std::string(model) == "neoverse-n1" ? "neon_dotprod"
                           : std::string(model) == "cortex-a72"  ? "neon"
                                                                  : "";
  if (want.empty()) GTEST_SKIP() << "no expectation for -cpu " << model;
  std::string got;
  for (const auto& v : list_variants())
    if (v.selected) got = v.name;
  EXPECT_EQ(got, want) << "-cpu " << model;
  std::printf("-cpu %s selects %s\n", model, got.c_str());
#else
  GTEST_SKIP() << "AArch64 rows only";
#endif
}

// Each shipped line of the kernel list is a registry row with its symbol's Ukernel, named
// after it; each catalogue-only line a row of the registry's catalogue.
TEST(MoeRegistry, RowsAreTheKernelList) {
  size_t n_shipped = 0, n_catalogue = 0;
  bool shipped = true;
#define CPUKERN_CATALOGUE_ONLY(...) \
  shipped = false;                  \
  CPUKERN_VARIANT(__VA_ARGS__)      \
  shipped = true;
#define CPUKERN_VARIANT(arch_, name_, isa_, priority_, ukernel_, mxfp4_, int8_, w4a8_) \
  CPUKERN_ON(arch_, {                                                                   \
    const Variant& v = shipped ? registry().variants().at(n_shipped++)                  \
                               : registry().catalogue().at(n_catalogue++);              \
    EXPECT_STREQ(v.name, #name_);                                                       \
    EXPECT_EQ(v.required, isa::isa_) << #name_;                                         \
    EXPECT_EQ(v.priority, priority_) << #name_;                                         \
    EXPECT_STREQ(v.ukernel.name, #ukernel_);                                            \
    EXPECT_STREQ(ukernel_.name, #ukernel_);                                             \
    EXPECT_STREQ(mxfp4_.name, #mxfp4_);                                                 \
    EXPECT_EQ(&ukernel_for(v, WeightFormat::kBf16), &ukernel_) << #name_;               \
    EXPECT_EQ(&ukernel_for(v, WeightFormat::kMxfp4), &mxfp4_) << #name_;                \
    EXPECT_TRUE(ukernel_.format == WeightFormat::kBf16 && ukernel_.pack) << #ukernel_;  \
    EXPECT_TRUE(mxfp4_.format == WeightFormat::kMxfp4 && mxfp4_.pack) << #mxfp4_;       \
    EXPECT_EQ(mxfp4_.mr, ukernel_.mr) << #mxfp4_;                                       \
    EXPECT_EQ(mxfp4_.nr, ukernel_.nr) << #mxfp4_;                                       \
    EXPECT_EQ(mxfp4_.packed_a_size(7, 64), ukernel_.packed_a_size(7, 64)) << #mxfp4_;   \
    EXPECT_EQ(!ukernel_.tiles, !mxfp4_.tiles) << #name_;                                \
    for (const Ukernel* u : {&ukernel_, &mxfp4_, &int8_})                               \
      if (u->tiles) {                                                                   \
        EXPECT_STREQ(u->tiles->layout, u->layout) << u->name;                           \
        EXPECT_EQ(u->tiles->nr, u->nr) << u->name;                                      \
        EXPECT_EQ(u->tiles->packed_size(61, 320), u->packed_size(61, 320)) << u->name;  \
        EXPECT_EQ(u->tiles->format, u->format) << u->name;                              \
      }                                                                                 \
    EXPECT_STREQ(int8_.name, #int8_);                                                   \
    EXPECT_EQ(&ukernel_for(v, WeightFormat::kInt8), &int8_) << #name_;                  \
    EXPECT_TRUE(int8_.format == WeightFormat::kInt8 && int8_.pack) << #int8_;           \
    EXPECT_STREQ(w4a8_.name, #w4a8_);                                                   \
    EXPECT_EQ(&ukernel_for(v, WeightFormat::kMxfp4A8), &w4a8_) << #name_;               \
    EXPECT_TRUE(w4a8_.format == WeightFormat::kMxfp4A8 && w4a8_.pack) << #w4a8_;        \
  })
#include "kernels/moe/ukernels/ukernels.inc"
#undef CPUKERN_VARIANT
#undef CPUKERN_CATALOGUE_ONLY
  EXPECT_EQ(n_shipped, registry().variants().size());
  EXPECT_EQ(n_catalogue, registry().catalogue().size());
}

TEST(MoeRoute, SoftmaxTopkTiesAndRenormalize) {
  const float logits[2 * 4] = {1.0f, 3.0f, 3.0f, 0.0f, 0.5f, 0.5f, 0.5f, 0.5f};
  float w[2 * 2];
  int32_t ids[2 * 2];
  route(logits, 2, 4, 2, false, w, ids);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  const double z = std::exp(1.0) + 2 * std::exp(3.0) + 1.0;
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(3.0) / z, 1e-6);
  EXPECT_EQ(ids[2], 0);  // all equal: lowest ids
  EXPECT_EQ(ids[3], 1);
  EXPECT_NEAR(w[2], 0.25, 1e-6);
  route(logits, 2, 4, 2, true, w, ids);
  EXPECT_NEAR(w[0], 0.5, 1e-6);
  EXPECT_NEAR(w[1], 0.5, 1e-6);
  EXPECT_NEAR(w[2] + w[3], 1.0, 1e-6);
  EXPECT_THROW(route(logits, 2, 4, 5, true, w, ids), InvalidArgument);
  EXPECT_THROW(route(logits, 2, 4, 0, true, w, ids), InvalidArgument);
  route(nullptr, 0, 4, 2, true, nullptr, nullptr);  // T = 0: nothing
}

TEST(MoeRoute, TopkSoftmaxTakesTheLargestLogitsThenNormalisesThem) {
  const float logits[2 * 4] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.0f, 0.0f, -2.0f};
  float w[2 * 2];
  int32_t ids[2 * 2];
  route(logits, 2, 4, 2, false, w, ids, RouteRule::kTopkSoftmax);
  EXPECT_EQ(ids[0], 1);  // 3 and 3: the lower id first
  EXPECT_EQ(ids[1], 3);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
  EXPECT_EQ(ids[2], 1);
  EXPECT_EQ(ids[3], 2);
  EXPECT_FLOAT_EQ(w[2], 0.5f);
  const float spread[4] = {0.0f, 1.0f, -5.0f, 2.0f};
  route(spread, 1, 4, 3, false, w, ids, RouteRule::kTopkSoftmax);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 1);
  EXPECT_EQ(ids[2], 0);
  const double z = 1.0 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(w[0], 1.0 / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(-1.0) / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(-2.0) / z, 1e-6);
  EXPECT_THROW(route(logits, 2, 4, 2, true, w, ids, RouteRule::kTopkSoftmax), InvalidArgument);
  EXPECT_EQ(parse_route_rule("topk_softmax"), RouteRule::kTopkSoftmax);
  EXPECT_EQ(parse_route_rule("softmax_topk"), RouteRule::kSoftmaxTopk);
  EXPECT_THROW(parse_route_rule("softmax"), InvalidArgument);
}

// router() is linear() then route() on the bf16 logits: the same logits, ids and weights
// (rounded once to bf16) as the two calls, for both rules, with and without a bias.
TEST(MoeRoute, RouterIsLinearThenRouteOnTheBf16Logits) {
  const int64_t t = 5, h = 40, e = 12, topk = 3;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<bf16_t> x(t * h), wr(e * h), bias(e);
  for (auto& v : x) v = f32_to_bf16(nd(rng));
  for (auto& v : wr) v = f32_to_bf16(0.2f * nd(rng));
  for (auto& v : bias) v = f32_to_bf16(0.1f * nd(rng));
  auto w = prepare(wr.data(), 1, e, h, "");
  for (RouteRule rule : {RouteRule::kSoftmaxTopk, RouteRule::kTopkSoftmax}) {
    const bf16_t* const no_bias = nullptr;
    for (const bf16_t* b : {no_bias, static_cast<const bf16_t*>(bias.data())}) {
      const bool renorm = rule == RouteRule::kSoftmaxTopk;
      std::vector<bf16_t> logits(t * e), want_logits(t * e), weights(t * topk);
      std::vector<int64_t> ids(t * topk);
      router(x.data(), t, h, *w, b, topk, rule, renorm, 1, logits.data(), weights.data(),
             ids.data());
      linear(x.data(), t, h, *w, b, 1, want_logits.data());
      EXPECT_EQ(logits, want_logits);
      std::vector<float> lf(t * e), want_w(t * topk);
      std::vector<int32_t> want_ids(t * topk);
      for (int64_t j = 0; j < t * e; ++j) lf[j] = bf16_to_f32(want_logits[j]);
      route(lf.data(), t, e, topk, renorm, want_w.data(), want_ids.data(), rule);
      for (int64_t j = 0; j < t * topk; ++j) {
        EXPECT_EQ(ids[j], want_ids[j]) << j;
        EXPECT_EQ(weights[j], f32_to_bf16(want_w[j])) << j;
      }
    }
  }
  std::vector<bf16_t> logits(t * e), weights(t * topk);
  std::vector<int64_t> ids(t * topk);
  EXPECT_THROW(router(x.data(), t, h, *w, nullptr, e + 1, RouteRule::kSoftmaxTopk, true, 1,
                      logits.data(), weights.data(), ids.data()),
               InvalidArgument);
  EXPECT_THROW(router(x.data(), t, h - 1, *w, nullptr, topk, RouteRule::kSoftmaxTopk, true, 1,
                      logits.data(), weights.data(), ids.data()),
               InvalidArgument);
  EXPECT_THROW(router(x.data(), t, h, *w, nullptr, topk, RouteRule::kSoftmaxTopk, true, 1,
                      x.data(), weights.data(), ids.data()),
               InvalidArgument);  // logits over x
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "<no InvalidArgument>";
}

// cpukern.moe.prepare and quantize check nothing of their own: these are their rules.
TEST(MoeValidation, PrepareFormatAndQuantizeK) {
  EXPECT_EQ(prepare_format("bf16", "fp32", false), WeightFormat::kBf16);
  EXPECT_EQ(prepare_format("mxfp4", "fp32", true), WeightFormat::kMxfp4);
  EXPECT_EQ(prepare_format("mxfp4", "int8", true), WeightFormat::kMxfp4A8);
  EXPECT_EQ(prepare_format("int8", "fp32", true), WeightFormat::kInt8);
  EXPECT_EQ(error_of([] { prepare_format("mxfp4_a8", "fp32", true); }),
            "format: expected one of 'bf16', 'mxfp4', 'int8', got 'mxfp4_a8'");
  EXPECT_EQ(error_of([] { prepare_format("mxfp4", "int4", true); }),
            "act: expected 'fp32' or 'int8', got 'int4'");
  EXPECT_EQ(error_of([] { prepare_format("bf16", "int8", false); }),
            "act: expected 'fp32' with format='bf16' (int8 activations only with format='mxfp4'), "
            "got 'int8'");
  EXPECT_EQ(error_of([] { prepare_format("int8", "int8", true); }).rfind("act: ", 0), 0u);
  EXPECT_EQ(error_of([] { prepare_format("int8", "fp32", false); }),
            "scales: required with format='int8' (float32 (E, O))");
  EXPECT_EQ(error_of([] { prepare_format("mxfp4", "int8", false); }),
            "scales: required with format='mxfp4' (uint8 (E, O, I/32))");
  EXPECT_EQ(error_of([] { prepare_format("bf16", "fp32", true); }),
            "scales: only with format='mxfp4' or format='int8'");
  check_quantize_k(WeightFormat::kInt8, 1, "");
  check_quantize_k(WeightFormat::kMxfp4, 64, "");
  EXPECT_EQ(error_of([] { check_quantize_k(WeightFormat::kInt8, 0, "w0"); }),
            "w: expected (..., K) with K >= 1, got w0");
  for (int64_t k : {0, 16, 33})
    EXPECT_EQ(error_of([k] { check_quantize_k(WeightFormat::kMxfp4, k, "w0"); }),
              "w: expected (..., K) with K a positive multiple of 32, got w0");
}

TEST(MoeValidation, NamesTheArgumentAndLeavesOutputAlone) {
  EXPECT_EQ(parse_activation("swigluoai"), Activation::kSwigluOai);
  EXPECT_EQ(error_of([] { parse_activation("relu"); }).rfind("activation:", 0), 0u);
  const int64_t e = 4, h = 8, i = 6, t = 3, k = 2;
  std::mt19937 rng(3);
  auto x = random_bf16(size_t(t * h), 1.0f, rng);
  auto w13r = random_bf16(size_t(e * 2 * i * h), 0.3f, rng);
  auto w2r = random_bf16(size_t(e * h * i), 0.3f, rng);
  auto w13 = prepare(w13r.data(), e, 2 * i, h, "reference");
  auto w2 = prepare(w2r.data(), e, h, i, "reference");
  auto w2_bad_i = prepare(w2r.data(), e, h, i - 1, "reference");
  auto w2_bad_e = prepare(w2r.data(), e - 1, h, i, "reference");
  std::vector<float> wt(size_t(t * k), 0.5f);
  std::vector<int32_t> ids = {0, 1, 2, 3, 1, 2};
  std::vector<bf16_t> out(size_t(t * h), 0x1234);
  auto call = [&](const PackedExperts& a, const PackedExperts& b, const std::vector<int32_t>& id,
                  int64_t topk, bool skip, int threads, int64_t hh) {
    return error_of([&] {
      fused_moe(x.data(), t, hh, a, b, wt.data(), id.data(), topk, Activation::kSilu, nullptr,
                nullptr, skip, threads, out.data());
    });
  };
  EXPECT_EQ(call(*w13, *w2_bad_i, ids, k, false, 1, h).rfind("w13:", 0), 0u);
  EXPECT_EQ(call(*w13, *w2_bad_e, ids, k, false, 1, h).rfind("w2:", 0), 0u);
  EXPECT_EQ(call(*w13, *w2, ids, k, false, 1, h + 1).rfind("w13:", 0), 0u);
  EXPECT_EQ(call(*w13, *w2, ids, 5, false, 1, h).rfind("topk:", 0), 0u);
  EXPECT_EQ(call(*w13, *w2, ids, k, true, 1, h).rfind("skip_weighted:", 0), 0u);
  EXPECT_EQ(call(*w13, *w2, ids, k, false, -5, h).rfind("threads:", 0), 0u);
  EXPECT_EQ(call(*w13, *w2, ids, k, false, -1, h).rfind("threads:", 0), 0u);  // 0 = default
  EXPECT_EQ(call(*w13, *w2, ids, k, false, 4097, h).rfind("threads:", 0), 0u);
  std::vector<int32_t> bad_ids = {0, 1, 2, 4, 1, 2};
  EXPECT_EQ(call(*w13, *w2, bad_ids, k, false, 1, h).rfind("topk_ids:", 0), 0u);
  bad_ids[3] = -1;
  EXPECT_EQ(call(*w13, *w2, bad_ids, k, false, 1, h).rfind("topk_ids:", 0), 0u);
  for (bf16_t v : out) ASSERT_EQ(v, 0x1234) << "output written before validation finished";
  EXPECT_EQ(error_of([&] { prepare(w2r.data(), e, h, i, "no_such_isa"); }).rfind("variant:", 0), 0u);
  EXPECT_EQ(error_of([&] { prepare(w2r.data(), 0, h, i, ""); }).rfind("w:", 0), 0u);
  // A second family, when this CPU has one, must not mix with the reference packing.
  for (const auto& v : list_variants()) {
    if (!v.supported || v.name == "reference") continue;
    auto other = prepare(w2r.data(), e, h, i, v.name);
    const std::string msg = call(*w13, *other, ids, k, false, 1, h);
    EXPECT_EQ(msg.rfind("w2:", 0), 0u) << msg;
    EXPECT_NE(msg.find("cannot be mixed"), std::string::npos) << msg;
  }
  // T = 0 is a no-op.
  fused_moe(nullptr, 0, h, *w13, *w2, nullptr, nullptr, k, Activation::kSilu, nullptr, nullptr,
            false, 1, nullptr);
}

// ---- MXFP4 experts ----------------------------------------------------------------------

struct Mx {
  std::vector<uint8_t> blocks, scales;
  std::vector<bf16_t> deq;  // dequantize(blocks, scales)
};

// MXFP4 weights of (rows, k): quantized from w, then (extremes) some blocks' scales replaced by
// the e8m0 extremes 0, 1, 127, 253, 254 with small codes (finite in bf16) or any codes.
Mx make_mx(const std::vector<bf16_t>& w, int64_t rows, int64_t k, bool extremes,
           std::mt19937& rng) {
  Mx m;
  const int64_t nb = k / 32;
  m.blocks.resize(size_t(rows * nb * 16));
  m.scales.resize(size_t(rows * nb));
  mxfp4::quantize(w.data(), rows, k, m.blocks.data(), m.scales.data());
  if (extremes) {
    const uint8_t ex[] = {0, 1, 127, 253, 254};
    for (size_t b = 0; b < m.scales.size(); b += 3) {
      m.scales[b] = ex[rng() % 5];
      for (int j = 0; j < 16; ++j) m.blocks[b * 16 + j] = uint8_t(rng());
    }
  }
  m.deq.resize(size_t(rows * k));
  mxfp4::dequantize(m.blocks.data(), m.scales.data(), rows, k, m.deq.data());
  return m;
}

std::vector<Case> mx_cases() {
  std::vector<Case> cs;
  for (const Case& c : cases())
    if (c.h % 32 == 0 && c.i % 32 == 0 && c.h >= 32 && c.i >= 32) cs.push_back(c);
  cs.push_back({4, 2, 2880, 64, 3, Activation::kSwigluOai, true, false, false, false});
  return cs;
}

class MoeMxfp4Test : public ::testing::TestWithParam<Param> {};

// fused_moe on MXFP4 experts == fused_moe on their dequantized bf16 experts, bit for bit, for
// the same variant (w13 and w2 both MXFP4, and each alone), any thread count; and the result
// is within the float64 model's bound.
TEST_P(MoeMxfp4Test, EqualsBf16OfDequantizedBitwise) {
  const Param& prm = GetParam();
  CPUKERN_SKIP_IF_UNSUPPORTED(test_variant(prm.variant));
  const Case& c = prm.c;
  std::mt19937 rng(77u + uint32_t(c.h + c.i));
  Problem p = make_problem(c, 4321u + uint32_t(c.h * 7 + c.i));
  const Mx m13 = make_mx(p.w13, c.e * 2 * c.i, c.h, false, rng);
  const Mx m2 = make_mx(p.w2, c.e * c.h, c.i, false, rng);
  p.w13 = m13.deq;
  p.w2 = m2.deq;
  const std::string& isa = prm.variant;
  auto b13 = prepare(p.w13.data(), c.e, 2 * c.i, c.h, test_variant(isa));
  auto b2 = prepare(p.w2.data(), c.e, c.h, c.i, test_variant(isa));
  auto q13 = prepare_mxfp4(m13.blocks.data(), m13.scales.data(), c.e, 2 * c.i, c.h,
                           test_variant(isa));
  auto q2 = prepare_mxfp4(m2.blocks.data(), m2.scales.data(), c.e, c.h, c.i, test_variant(isa));
  EXPECT_EQ(q13->format, WeightFormat::kMxfp4);
  EXPECT_EQ(q13->nbytes() * 32, c.e * round_up(2 * c.i, q13->ukernel->nr) * c.h * 17)
      << "4.25 bits per weight";
  auto go = [&](const PackedExperts& w13, const PackedExperts& w2, int threads) {
    std::vector<bf16_t> out(size_t(c.t * c.h) + 1, 0x7fc1);
    fused_moe(p.x.data(), c.t, c.h, w13, w2, p.weights.data(), p.ids.data(), c.topk, c.act,
              c.bias ? p.b13.data() : nullptr, c.bias ? p.b2.data() : nullptr, c.skip_weighted,
              threads, out.data());
    EXPECT_EQ(out.back(), 0x7fc1) << "wrote past the output";
    out.pop_back();
    return out;
  };
  const auto want = go(*b13, *b2, 1);
  const size_t n = want.size() * 2;
  EXPECT_EQ(0, std::memcmp(go(*q13, *q2, 1).data(), want.data(), n)) << "mxfp4 w13 + w2";
  EXPECT_EQ(0, std::memcmp(go(*q13, *b2, 2).data(), want.data(), n)) << "mxfp4 w13, bf16 w2";
  EXPECT_EQ(0, std::memcmp(go(*b13, *q2, 3).data(), want.data(), n)) << "bf16 w13, mxfp4 w2";
  EXPECT_EQ(0, std::memcmp(go(*q13, *q2, 2).data(), want.data(), n)) << "threads=2";
  const std::vector<double> ref = model(p);
  int bad = 0;
  for (size_t q = 0; q < want.size(); ++q) {
    const double g = bf16_to_f32(want[q]), w = ref[q];
    if (!(std::fabs(g - w) <= 1e-3 + 1.6e-2 * std::fabs(w)) && ++bad <= 5)
      ADD_FAILURE() << "out[" << q << "] = " << g << ", float64 model " << w;
  }
  EXPECT_EQ(bad, 0);
}

std::vector<Param> mx_params() {
  std::vector<Param> ps;
  for (const auto& v : variant_names())
    for (const auto& c : mx_cases()) ps.push_back({v, c});
  return ps;
}
INSTANTIATE_TEST_SUITE_P(All, MoeMxfp4Test, ::testing::ValuesIn(mx_params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.variant + "_" + case_name(info.param.c);
                         });

// The MXFP4 ukernel against the variant's bf16 ukernel on the dequantized weights, bit for
// bit: e8m0 extremes (0, 1, 127, 253, 254: subnormal, inf and NaN results included), every
// row count, K past one K block, a sub-range of panels, accumulate mode.
class MoeMxfp4UkernelTest : public ::testing::TestWithParam<std::string> {};
TEST_P(MoeMxfp4UkernelTest, GemmEqualsBf16OfDequantized) {
  const Variant& v = test_variant(GetParam());
  CPUKERN_SKIP_IF_UNSUPPORTED(v);
  std::mt19937 rng(11);
  const auto bks = gemms_of(ukernel_for(v, WeightFormat::kBf16));
  const auto mks = gemms_of(ukernel_for(v, WeightFormat::kMxfp4));
  ASSERT_EQ(bks.size(), mks.size()) << "bf16 and MXFP4 must switch to tiles together";
  for (size_t gi = 0; gi < bks.size(); ++gi)
  for (int64_t o : {37, 61})
  for (int64_t k : {32, 288, 544})
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 17, 33}) {
    const Ukernel &bk = *bks[gi], &mk = *mks[gi];
    auto w = random_bf16(size_t(o * k), 1.0f, rng);
    const Mx mx = make_mx(w, o, k, true, rng);
    auto a = random_bf16(size_t(m * k), 1.0f, rng);
    std::vector<char> wb(size_t(bk.packed_size(o, k))), wm(size_t(mk.packed_size(o, k)));
    bk.pack({mx.deq.data()}, o, k, wb.data());
    mk.pack({mx.blocks.data(), mx.scales.data()}, o, k, wm.data());
    std::vector<char> ap(size_t(bk.packed_a_size(m, k)) + 64);
    bk.pack_a(a.data(), k, nullptr, m, k, ap.data());
    const int64_t p0 = 1, p1 = (o + bk.nr - 1) / bk.nr, ldc = (p1 - p0) * bk.nr + 3;
    for (bool acc : {false, true}) {
      std::vector<float> c1(size_t(m * ldc), 0.5f), c2 = c1;
      bk.gemm(ap.data(), m, k, wb.data(), p0, p1, c1.data(), ldc, acc);
      mk.gemm(ap.data(), m, k, wm.data(), p0, p1, c2.data(), ldc, acc);
      for (size_t q = 0; q < c1.size(); ++q) {
        uint32_t b1, b2;
        std::memcpy(&b1, &c1[q], 4);
        std::memcpy(&b2, &c2[q], 4);
        ASSERT_EQ(b1, b2) << (gi ? "tiles " : "") << "o=" << o << " k=" << k << " m=" << m << " accumulate=" << acc
                          << " C[" << q / ldc << "][" << q % ldc << "]: bf16 " << c1[q]
                          << ", MXFP4 " << c2[q];
      }
    }
  }
}
INSTANTIATE_TEST_SUITE_P(All, MoeMxfp4UkernelTest, ::testing::ValuesIn(variant_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// ---- int8 (W8A8) experts ------------------------------------------------------------------

struct Q8 {
  std::vector<int8_t> q;
  std::vector<float> s;
};

Q8 make_q8(const std::vector<bf16_t>& w, int64_t rows, int64_t k) {
  Q8 r;
  r.q.resize(size_t(rows * k));
  r.s.resize(size_t(rows));
  EXPECT_EQ(int8::quantize_weights(w.data(), rows, k, r.q.data(), r.s.data()), -1);
  return r;
}

// The test's own statement of the activation quantisation (int8.h), written independently of
// the library's: amax, 127 / amax, round half to even, clamp; the 2**64 pre-scale of tiny rows;
// NaN scale for rows holding inf or NaN.
float model_quantize_row(const bf16_t* x, int64_t k, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t j = 0; j < k; ++j) {
    const float v = std::fabs(bf16_to_f32(x[j]));
    finite &= std::isfinite(v);
    if (v > amax) amax = v;
  }
  if (!finite || amax == 0.0f) {
    for (int64_t j = 0; j < k; ++j) q[j] = 0;
    return finite ? 0.0f : std::nanf("");
  }
  const float pre = amax < std::ldexp(1.0f, -64) ? std::ldexp(1.0f, 64) : 1.0f;
  const float inv = 127.0f / (amax * pre);
  for (int64_t j = 0; j < k; ++j) {
    volatile float v = (bf16_to_f32(x[j]) * pre) * inv;
    const float r = std::nearbyint(v);
    q[j] = int8_t(std::max(-127.0f, std::min(127.0f, r)));
  }
  return amax / 127.0f;
}

// Activation rows with the edge cases of the quantiser: all-zero rows, rows whose amax is
// +-127 steps exactly, huge and tiny (subnormal) magnitudes, one-hot rows, rows near bf16's max.
std::vector<bf16_t> int8_rows(int64_t m, int64_t k, std::mt19937& rng) {
  std::vector<bf16_t> a = random_bf16(size_t(m * k), 1.0f, rng);
  for (int64_t r = 0; r < m; ++r) {
    bf16_t* row = a.data() + r * k;
    switch (r % 7) {
      case 1: std::fill(row, row + k, bf16_t(0)); break;                   // amax 0
      case 2: for (int64_t j = 0; j < k; ++j) row[j] = f32_to_bf16(j % 2 ? 127.0f : -127.0f); break;
      case 3: for (int64_t j = 0; j < k; ++j) row[j] = f32_to_bf16(bf16_to_f32(row[j]) * 1e30f); break;
      case 4: for (int64_t j = 0; j < k; ++j) row[j] = f32_to_bf16(bf16_to_f32(row[j]) * 1e-39f); break;
      case 5: std::fill(row, row + k, bf16_t(0)); row[(r * 5) % k] = f32_to_bf16(-3.0f); break;
      // |x| near bf16's max (3.39e38): float(acc) * sa alone overflowed here (the first
      // epilogue gave inf, and NaN after a zero scale), the double epilogue's result is finite
      case 6: for (int64_t j = 0; j < k; ++j) row[j] = f32_to_bf16(bf16_to_f32(row[j]) * 1e38f); break;
      default: break;
    }
  }
  return a;
}

// Every variant's int8 ukernel (the registry's int8 column) equals the scalar reference's bit
// for bit, and the reference equals the formula float(double(exact int32 sum) * sa * sw)
// computed here: every row count 1..17, K of one step, ragged (not a multiple of any tile's k step),
// past 2880; N ragged; a sub-range of panels; accumulate mode; weights at +-127.
class MoeInt8UkernelTest : public ::testing::TestWithParam<std::string> {};
TEST_P(MoeInt8UkernelTest, GemmEqualsScalarReferenceBitwise) {
  const Variant& v = test_variant(GetParam());
  CPUKERN_SKIP_IF_UNSUPPORTED(v);
  const Ukernel& ref = ukernel_for(test_variant("reference"), WeightFormat::kInt8);
  const bool qemu = std::getenv("CPUKERN_QEMU_CPU") != nullptr;
  std::mt19937 rng(21);
  // k 7 and 27: 2 and 3 k steps of 4 past a multiple of 16 (SDOT's ragged lane group); o 70:
  // 4 and 8 panels of 16 and 8 columns after p0 (the 1-row tiles' 4-panel register tile).
  const std::vector<int64_t> ks = qemu ? std::vector<int64_t>{1, 3, 7, 27, 32, 64, 301, 2883}
                                       : std::vector<int64_t>{1, 3, 7, 27, 32, 64, 301, 2880, 2883};
  for (const Ukernel* g : gemms_of(ukernel_for(v, WeightFormat::kInt8)))  // AMX: tiles too
  for (int64_t o : {1, 37, 45, 70})
  for (int64_t k : ks)
  for (int64_t m = 1; m <= 17; ++m) {
    const Ukernel& uk = *g;
    ASSERT_EQ(uk.format, WeightFormat::kInt8);
    if (qemu && k > 1000 && m % 4 != 1) continue;
    if (qemu && o == 70 && k > 64 && m > 4) continue;
    auto wf = random_bf16(size_t(o * k), 1.0f, rng);
    Q8 w = make_q8(wf, o, k);
    for (int64_t c = 0; c < o; c += 3) w.q[size_t(c * k + (c % k))] = c % 2 ? 127 : -127;
    if (o > 1) w.s[1] = 0.0f;  // a zero column scale
    const auto a = int8_rows(m, k, rng);
    std::vector<char> wp(size_t(uk.packed_size(o, k))), wr(size_t(ref.packed_size(o, k)));
    uk.pack({w.q.data(), w.s.data()}, o, k, wp.data());
    ref.pack({w.q.data(), w.s.data()}, o, k, wr.data());
    std::vector<char> ap(size_t(uk.packed_a_size(m, k)) + 64), ar(size_t(ref.packed_a_size(m, k)));
    uk.pack_a(a.data(), k, nullptr, m, k, ap.data());
    ref.pack_a(a.data(), k, nullptr, m, k, ar.data());
    // The formula, from the test's own quantiser and an int64 sum.
    std::vector<int8_t> qa(size_t(m * k));
    std::vector<float> sa(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) sa[r] = model_quantize_row(a.data() + r * k, k, qa.data() + r * k);
    const int64_t p0 = o > uk.nr ? 1 : 0, p1 = (o + uk.nr - 1) / uk.nr;
    const int64_t rp0 = p0 * uk.nr, rp1 = p1 * uk.nr;  // the same columns in the reference (nr 1)
    const int64_t ldc = (p1 - p0) * uk.nr + 3;
    for (bool acc : {false, true}) {
      std::vector<float> c1(size_t(m * ldc), acc ? 0.25f : std::nanf("")), c2 = c1;
      uk.gemm(ap.data(), m, k, wp.data(), p0, p1, c1.data(), ldc, acc);
      ref.gemm(ar.data(), m, k, wr.data(), rp0, std::min(rp1, o), c2.data(), ldc, acc);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t col = 0; col < rp1 - rp0; ++col) {
          const int64_t n = rp0 + col;
          float want = 0.0f;
          if (n < o) {
            int64_t s = 0;
            for (int64_t q = 0; q < k; ++q) s += int64_t(qa[r * k + q]) * w.q[n * k + q];
            volatile double t = double(int32_t(s)) * double(sa[r]);
            volatile double u = t * double(w.s[n]);
            want = float(u);
          }
          if (acc) want = 0.25f + want;
          const float got = c1[r * ldc + col];
          const float rv = n < o ? c2[r * ldc + col] : want;
          auto same = [](float x, float y) {
            return std::memcmp(&x, &y, 4) == 0 || (std::isnan(x) && std::isnan(y));
          };
          ASSERT_TRUE(same(rv, want)) << "reference: o=" << o << " k=" << k << " m=" << m
                                      << " r=" << r << " col=" << n << " got " << rv
                                      << " want " << want << " accumulate=" << acc;
          ASSERT_TRUE(same(got, want)) << uk.name << ": o=" << o << " k=" << k << " m=" << m
                                       << " r=" << r << " col=" << n << " got " << got
                                       << " want " << want << " accumulate=" << acc;
        }
    }
  }
}
INSTANTIATE_TEST_SUITE_P(All, MoeInt8UkernelTest, ::testing::ValuesIn(variant_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// fused_moe on int8 experts (w13, w2 or both; the other bf16) against a float64 model of the
// same quantisation. The bound, derived per output element o of token t:
//  - a stage on int8 weights computes float(double(acc) * sa * sw) from the exact acc: two
//    double roundings (2**-53 each) and one fp32 rounding, |err| <= 1.01 u |y| (u = 2**-24); on bf16 weights an fp32 dot product of n
//    terms: |err| <= 1.01 n u sum|w a|;
//  - stage 3: (y + b2), * weight, += over topk slots: <= (topk + 2) u sum_j w_j (|y_j| + |b2_j|);
//  - the final bf16 rounding (8 significant bits): <= 2**-8 |out|;
//  - the activation is rounded to bf16 before stage 2: the kernel's fp32 activation and the
//    model's float64 one can round to neighbouring bf16 values only where the model's value
//    lies within tol_a of a rounding boundary (tol_a: 2**-18 (1 + |g|)(1 + |u|) for the fp32
//    activation's own error plus (2 + |g| + |u|) times stage 1's bound above). Such a slot
//    ("ambiguous") gets in addition sum_k |W2_ok| (2**-7 |a_k| + 1.01 (sa + sa')) for int8
//    w2 (the activation may differ by one bf16 ulp, and then its quantisation may differ by a
//    step anywhere in the row) or sum_k |W2_ok| 2**-7 |a_k| for bf16 w2.
struct Int8Model {
  std::vector<double> out, tol;
};

Int8Model int8_model(const Problem& p, bool q13, bool q2, const Q8& w13, const Q8& w2) {
  const Case& c = p.c;
  const double u = std::ldexp(1.0, -24);
  Int8Model m;
  m.out.assign(size_t(c.t * c.h), 0.0);
  m.tol.assign(size_t(c.t * c.h), 0.0);
  std::vector<double> other(size_t(c.h));
  std::vector<int8_t> qx(size_t(c.h)), qa(size_t(c.i));
  std::vector<bf16_t> abf(size_t(c.i));
  std::vector<double> a(size_t(c.i));
  const bool il = c.act == Activation::kSwigluOai;
  for (int64_t tok = 0; tok < c.t; ++tok) {
    const bf16_t* xr = p.x.data() + tok * c.h;
    const float sx = model_quantize_row(xr, c.h, qx.data());
    std::fill(other.begin(), other.end(), 0.0);
    for (int64_t j = 0; j < c.topk; ++j) {
      const int64_t ex = p.ids[tok * c.topk + j];
      const double wt = p.weights[tok * c.topk + j];
      bool ambiguous = false;
      // stage 1: one (row of w13, x) product, its value and its error bound
      auto lin1 = [&](int64_t row, double& err) {
        const int64_t n = ex * 2 * c.i + row;
        double y = 0, sabs = 0;
        if (q13) {
          int64_t s = 0;
          for (int64_t k = 0; k < c.h; ++k) s += int64_t(qx[k]) * w13.q[n * c.h + k];
          y = double(s) * sx * w13.s[n];
          err = 1.01 * u * std::fabs(y);
        } else {
          for (int64_t k = 0; k < c.h; ++k) {
            const double t = double(bf16_to_f32(p.w13[n * c.h + k])) * bf16_to_f32(xr[k]);
            y += t, sabs += std::fabs(t);
          }
          err = 1.01 * double(c.h) * u * sabs;
        }
        if (c.bias) {
          const double b = bf16_to_f32(p.b13[n]);
          y += b;
          err += u * (std::fabs(y) + std::fabs(b));
        }
        return y;
      };
      for (int64_t q = 0; q < c.i; ++q) {
        double eg, eu;
        const double g = lin1(il ? 2 * q : q, eg), uu = lin1(il ? 2 * q + 1 : c.i + q, eu);
        const double v = model_act(c.act, g, uu);
        abf[q] = f32_to_bf16(float(v));
        a[q] = bf16_to_f32(abf[q]);
        const double tol_a = std::ldexp((1 + std::fabs(g)) * (1 + std::fabs(uu)), -18) +
                             (2 + std::fabs(g) + std::fabs(uu)) * (eg + eu);
        if (f32_to_bf16(float(v - tol_a)) != f32_to_bf16(float(v + tol_a))) ambiguous = true;
      }
      float sa = 0.0f;
      if (q2) sa = model_quantize_row(abf.data(), c.i, qa.data());
      for (int64_t o = 0; o < c.h; ++o) {
        const int64_t n = ex * c.h + o;
        double y = 0, err = 0, wabs = 0, wa = 0;
        if (q2) {
          int64_t s = 0;
          for (int64_t k = 0; k < c.i; ++k) {
            s += int64_t(qa[k]) * w2.q[n * c.i + k];
            const double wq = double(w2.q[n * c.i + k]) * w2.s[n];
            wabs += std::fabs(wq);
            wa += std::fabs(wq * a[k]);
          }
          y = double(s) * sa * w2.s[n];
          err = 1.01 * u * std::fabs(y);
          if (ambiguous) err += std::ldexp(wa, -7) + 1.01 * wabs * sa * (2 + std::ldexp(1.0, -6));
        } else {
          for (int64_t k = 0; k < c.i; ++k) {
            const double t = double(bf16_to_f32(p.w2[n * c.i + k])) * a[k];
            y += t, wa += std::fabs(t);
          }
          err = 1.01 * double(c.i) * u * wa;
          if (ambiguous) err += std::ldexp(wa, -7);
        }
        const double b = c.bias ? bf16_to_f32(p.b2[n]) : 0.0;
        m.out[tok * c.h + o] += wt * (y + b);
        other[o] += wt * (err + double(c.topk + 2) * u * (std::fabs(y) + std::fabs(b)));
      }
    }
    for (int64_t o = 0; o < c.h; ++o)
      m.tol[tok * c.h + o] = std::ldexp(std::fabs(m.out[tok * c.h + o]), -8) * 1.01 + 1.01 * other[o];
  }
  return m;
}

std::vector<Case> int8_cases() {
  std::vector<Case> cs;
  const bool qemu = std::getenv("CPUKERN_QEMU_CPU") != nullptr;
  for (const Case& c : cases())
    if (!qemu || c.h * c.i <= 128 * 176) cs.push_back(c);
  return cs;
}

class MoeInt8Test : public ::testing::TestWithParam<Param> {};

// Every case with int8 w13 + int8 w2, int8 w13 + bf16 w2 and bf16 w13 + int8 w2 (threads 1,
// 2, 3 bitwise equal) within the model's bound; the int8 results equal the reference
// variant's where both use int8 for both GEMMs and the activation's rounding is not ambiguous
// (tested through the bound).
TEST_P(MoeInt8Test, MatchesFloat64ModelOfTheQuantisation) {
  const Param& prm = GetParam();
  CPUKERN_SKIP_IF_UNSUPPORTED(test_variant(prm.variant));
  const Case& c = prm.c;
  const Problem p = make_problem(c, 8642u + uint32_t(c.h * 7 + c.i));
  const Q8 w13 = make_q8(p.w13, c.e * 2 * c.i, c.h), w2 = make_q8(p.w2, c.e * c.h, c.i);
  const std::string& isa = prm.variant;
  auto i13 = prepare_int8(w13.q.data(), w13.s.data(), c.e, 2 * c.i, c.h, test_variant(isa));
  auto i2 = prepare_int8(w2.q.data(), w2.s.data(), c.e, c.h, c.i, test_variant(isa));
  auto b13 = prepare(p.w13.data(), c.e, 2 * c.i, c.h, test_variant(isa));
  auto b2 = prepare(p.w2.data(), c.e, c.h, c.i, test_variant(isa));
  EXPECT_EQ(i13->format, WeightFormat::kInt8);
  auto go = [&](const PackedExperts& x13, const PackedExperts& x2, int threads) {
    std::vector<bf16_t> out(size_t(c.t * c.h) + 1, 0x7fc1);
    fused_moe(p.x.data(), c.t, c.h, x13, x2, p.weights.data(), p.ids.data(), c.topk, c.act,
              c.bias ? p.b13.data() : nullptr, c.bias ? p.b2.data() : nullptr, c.skip_weighted,
              threads, out.data());
    EXPECT_EQ(out.back(), 0x7fc1) << "wrote past the output";
    out.pop_back();
    return out;
  };
  for (int mix = 0; mix < 3; ++mix) {
    const bool q13 = mix != 2, q2 = mix != 1;
    const PackedExperts& x13 = q13 ? *i13 : *b13;
    const PackedExperts& x2 = q2 ? *i2 : *b2;
    const auto got = go(x13, x2, 1);
    const Int8Model m = int8_model(p, q13, q2, w13, w2);
    int bad = 0;
    for (size_t q = 0; q < got.size(); ++q) {
      const double g = bf16_to_f32(got[q]);
      if (!(std::fabs(g - m.out[q]) <= m.tol[q]) && ++bad <= 5)
        ADD_FAILURE() << "w13 " << (q13 ? "int8" : "bf16") << ", w2 " << (q2 ? "int8" : "bf16")
                      << ": out[" << q / c.h << "][" << q % c.h << "] = " << g << ", model "
                      << m.out[q] << " +- " << m.tol[q];
    }
    EXPECT_EQ(bad, 0);
    for (int th : {2, 3})
      EXPECT_EQ(0, std::memcmp(go(x13, x2, th).data(), got.data(), got.size() * 2))
          << "threads=" << th << " mix=" << mix;
  }
}

std::vector<Param> int8_params() {
  std::vector<Param> ps;
  for (const auto& v : variant_names())
    for (const auto& c : int8_cases()) ps.push_back({v, c});
  return ps;
}
INSTANTIATE_TEST_SUITE_P(All, MoeInt8Test, ::testing::ValuesIn(int8_params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.variant + "_" + case_name(info.param.c);
                         });

TEST(Int8, QuantizeWeightsFormulaAndRoundTrip) {
  std::mt19937 rng(8);
  const int64_t rows = 9, k = 67;
  auto w = random_bf16(size_t(rows * k), 2.0f, rng);
  std::fill(w.begin() + 2 * k, w.begin() + 3 * k, bf16_t(0));  // amax 0 row
  w[5 * k + 3] = f32_to_bf16(-1e30f);
  Q8 q = make_q8(w, rows, k);
  EXPECT_EQ(q.s[2], 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(bf16_to_f32(w[r * k + j])));
    EXPECT_EQ(q.s[r], amax / 127.0f) << r;
    for (int64_t j = 0; j < k; ++j) {
      const int8_t want = q.s[r] == 0.0f ? 0 : int8_t(std::max(-127.0f, std::min(127.0f,
                              std::nearbyint(bf16_to_f32(w[r * k + j]) / q.s[r]))));
      ASSERT_EQ(q.q[r * k + j], want) << r << " " << j;
      // dequantize(quantize(w)) within half a step of w
      EXPECT_LE(std::fabs(double(q.q[r * k + j]) * q.s[r] - bf16_to_f32(w[r * k + j])),
                0.5 * q.s[r] * (1 + 1e-5));
    }
  }
  std::vector<float> d(size_t(rows * k));
  int8::dequantize(q.q.data(), q.s.data(), rows, k, d.data());
  for (size_t j = 0; j < d.size(); ++j) ASSERT_EQ(d[j], float(q.q[j]) * q.s[j / k]);
  w[7] = f32_to_bf16(std::nanf(""));
  std::vector<int8_t> qq(size_t(rows * k));
  std::vector<float> ss(static_cast<size_t>(rows));
  EXPECT_EQ(int8::quantize_weights(w.data(), rows, k, qq.data(), ss.data()), 7);
  // The activation quantiser equals the test's statement of it on the edge rows.
  const auto a = int8_rows(14, 45, rng);
  std::vector<int8_t> q1(45), q2(45);
  for (int64_t r = 0; r < 14; ++r) {
    const float s1 = int8::quantize_row(a.data() + r * 45, 45, q1.data());
    const float s2 = model_quantize_row(a.data() + r * 45, 45, q2.data());
    EXPECT_TRUE(s1 == s2) << r;
    EXPECT_EQ(q1, q2) << r;
  }
  std::vector<bf16_t> bad(5, f32_to_bf16(1.0f));
  bad[2] = f32_to_bf16(INFINITY);
  EXPECT_TRUE(std::isnan(int8::quantize_row(bad.data(), 5, q1.data())));
  EXPECT_EQ(q1[0], 0);
}

TEST(Int8, ValidationNamesTheArgument) {
  std::vector<int8_t> q(2 * 3 * 8, 5);
  std::vector<float> s(2 * 3, 0.5f);
  EXPECT_EQ(error_of([&] { prepare_int8(q.data(), s.data(), 2, 3, 0, ""); }).rfind("w:", 0), 0u);
  {
    std::vector<int8_t> big(size_t(int8::kMaxK + 1), 1);
    std::vector<float> one(1, 1.0f);
    EXPECT_EQ(error_of([&] { prepare_int8(big.data(), one.data(), 1, 1, int8::kMaxK + 1, ""); })
                  .rfind("i:", 0), 0u);
    EXPECT_NO_THROW(prepare_int8(big.data(), one.data(), 1, 1, int8::kMaxK, "reference"));
  }
  EXPECT_EQ(error_of([&] { prepare_int8(q.data(), s.data(), 0, 3, 8, ""); }).rfind("w:", 0), 0u);
  q[11] = -128;
  std::string msg = error_of([&] { prepare_int8(q.data(), s.data(), 2, 3, 8, ""); });
  EXPECT_EQ(msg.rfind("w:", 0), 0u) << msg;
  EXPECT_NE(msg.find("expert 0, row 1, column 3"), std::string::npos) << msg;
  q[11] = 127;
  for (float bad : {-1.0f, std::nanf(""), INFINITY}) {
    s[4] = bad;
    msg = error_of([&] { prepare_int8(q.data(), s.data(), 2, 3, 8, ""); });
    EXPECT_EQ(msg.rfind("scales:", 0), 0u) << msg;
    EXPECT_NE(msg.find("expert 1, row 1"), std::string::npos) << msg;
  }
  s[4] = 0.0f;
  auto p = prepare_int8(q.data(), s.data(), 2, 3, 8, "reference");
  EXPECT_EQ(p->format, WeightFormat::kInt8);
  EXPECT_EQ(parse_format("int8"), WeightFormat::kInt8);
  EXPECT_STREQ(format_name(WeightFormat::kInt8), "int8");
}

// ---- batch invariance ------------------------------------------------------------------

// A token's output is bitwise the same whatever other tokens share its call: the whole batch,
// the token alone, random chunks, any thread count. Every tile sums each output element in one
// fixed order (sequential in k), whatever the number of rows in its block, the K blocking or
// the column split. H and I past one K block (256), so that the blocked loop is exercised.
struct BatchParam {
  std::string variant;
  WeightFormat format;
};

class MoeBatchInvariance : public ::testing::TestWithParam<BatchParam> {};

TEST_P(MoeBatchInvariance, SplitsAndThreadsGiveTheSameBits) {
  const BatchParam& prm = GetParam();
  CPUKERN_SKIP_IF_UNSUPPORTED(test_variant(prm.variant));
  const int64_t tmax = 70;
  // Under qemu-user (about 50x slower) fewer whole-batch sizes and one random round: still
  // every row-block shape (1, 4, 5, 8, 9 rows and several blocks) and a ragged tail.
  const bool qemu = std::getenv("CPUKERN_QEMU_CPU") != nullptr;
  const std::vector<int64_t> batch_sizes =
      qemu ? std::vector<int64_t>{1, 5, 9, 45, 70} : std::vector<int64_t>{1, 4, 5, 8, 9, 45, 64, 70};
  const std::vector<int> thread_counts = qemu ? std::vector<int>{1, 3} : std::vector<int>{1, 2, 3};
  const Case shapes[] = {
      // One expert, top-1: every token lands in one expert (the rows per block follow T).
      {1, 1, 320, 288, tmax, Activation::kSwigluOai, true, false, false, false},
      {4, 2, 320, 288, tmax, Activation::kSilu, false, false, false, false},
      {8, 4, 64, 96, tmax, Activation::kGeluTanh, true, false, false, false},
  };
  for (const Case& c : shapes) {
    std::mt19937 rng(2024u + uint32_t(c.e));
    Problem p = make_problem(c, 555u + uint32_t(c.e));
    std::shared_ptr<const PackedExperts> w13, w2;
    if (prm.format == WeightFormat::kMxfp4 || prm.format == WeightFormat::kMxfp4A8) {
      const Mx m13 = make_mx(p.w13, c.e * 2 * c.i, c.h, false, rng);
      const Mx m2 = make_mx(p.w2, c.e * c.h, c.i, false, rng);
      w13 = prepare_mxfp4(m13.blocks.data(), m13.scales.data(), c.e, 2 * c.i, c.h,
                          test_variant(prm.variant), prm.format);
      w2 = prepare_mxfp4(m2.blocks.data(), m2.scales.data(), c.e, c.h, c.i,
                         test_variant(prm.variant), prm.format);
    } else if (prm.format == WeightFormat::kInt8) {
      const Q8 q13 = make_q8(p.w13, c.e * 2 * c.i, c.h), q2 = make_q8(p.w2, c.e * c.h, c.i);
      w13 = prepare_int8(q13.q.data(), q13.s.data(), c.e, 2 * c.i, c.h, test_variant(prm.variant));
      w2 = prepare_int8(q2.q.data(), q2.s.data(), c.e, c.h, c.i, test_variant(prm.variant));
    } else {
      w13 = prepare(p.w13.data(), c.e, 2 * c.i, c.h, test_variant(prm.variant));
      w2 = prepare(p.w2.data(), c.e, c.h, c.i, test_variant(prm.variant));
    }
    ASSERT_EQ(w13->format, prm.format);
    // Tokens [t0, t0 + n) as one call.
    auto call = [&](int64_t t0, int64_t n, int threads, bf16_t* out) {
      fused_moe(p.x.data() + t0 * c.h, n, c.h, *w13, *w2, p.weights.data() + t0 * c.topk,
                p.ids.data() + t0 * c.topk, c.topk, c.act, c.bias ? p.b13.data() : nullptr,
                c.bias ? p.b2.data() : nullptr, false, threads, out);
    };
    // The reference: every token alone. A row with AMX tiles runs them for calls of more than
    // tiles_min_rows rows per expert (T * topk > min * E, from the caller's shapes only): those
    // calls must all give the bits of the whole batch (which runs tiles; for bf16 and MXFP4),
    // the others those of each token alone.
    std::vector<bf16_t> alone(size_t(tmax * c.h)), whole(size_t(tmax * c.h));
    for (int64_t tok = 0; tok < tmax; ++tok) call(tok, 1, 1, alone.data() + tok * c.h);
    auto tiles = [&](int64_t n) {
      return &ukernel_for_call(*w13->ukernel, n * c.topk, c.e) != w13->ukernel;
    };
    ASSERT_FALSE(tiles(1)) << "decode must run the vector tiles";
    call(0, tmax, 1, whole.data());
    // int8 sums are exact: the AMX and VNNI tiles must give the same bits, so every call must
    // equal each token alone.
    const bool exact = prm.format == WeightFormat::kInt8 || prm.format == WeightFormat::kMxfp4A8;
    const std::vector<bf16_t>& big = tiles(tmax) && !exact ? whole : alone;
    int tile_calls = 0;
    auto expect_same = [&](const std::vector<bf16_t>& got, int64_t t0, const std::string& how) {
      const int64_t n = int64_t(got.size()) / c.h;
      const std::vector<bf16_t>& want = tiles(n) ? big : alone;
      tile_calls += tiles(n);
      for (int64_t tok = 0; tok < n; ++tok) {
        if (std::memcmp(got.data() + tok * c.h, want.data() + (t0 + tok) * c.h, size_t(c.h) * 2)) {
          int64_t col = 0;
          while (got[tok * c.h + col] == want[(t0 + tok) * c.h + col]) ++col;
          ADD_FAILURE() << case_name(c) << " " << how << ": token " << t0 + tok << " column " << col
                        << " = " << bf16_to_f32(got[tok * c.h + col])
                        << (&want == &whole ? ", whole batch (tiles) " : ", alone ")
                        << bf16_to_f32(want[(t0 + tok) * c.h + col]);
          return;
        }
      }
    };
    int n_calls = 0;
    for (int64_t t : batch_sizes)
      for (int threads : thread_counts) {
        std::vector<bf16_t> out(size_t(t * c.h));
        call(0, t, threads, out.data());
        expect_same(out, 0, "batch of " + std::to_string(t) + ", threads=" + std::to_string(threads));
        ++n_calls;
      }
    // Random chunks (sizes 1..20) over the whole range, random thread counts.
    for (int round = 0; round < (qemu ? 1 : 3); ++round) {
      for (int64_t t0 = 0, n; t0 < tmax; t0 += n) {
        n = std::min<int64_t>(tmax - t0, 1 + int64_t(rng() % 20));
        const int threads = 1 + int(rng() % 3);
        std::vector<bf16_t> out(size_t(n * c.h));
        call(t0, n, threads, out.data());
        expect_same(out, t0, "chunk [" + std::to_string(t0) + ", " + std::to_string(t0 + n) +
                                 "), threads=" + std::to_string(threads));
      }
    }
    EXPECT_GT(n_calls, 0);
    if (tiles(tmax)) {
      EXPECT_GT(tile_calls, 3) << "the tile side was hardly exercised";
    }
  }
}

std::vector<BatchParam> batch_params() {
  std::vector<BatchParam> ps;
  for (const auto& v : variant_names())
    for (WeightFormat f : {WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8,
                           WeightFormat::kMxfp4A8})
      ps.push_back({v, f});
  return ps;
}
INSTANTIATE_TEST_SUITE_P(All, MoeBatchInvariance, ::testing::ValuesIn(batch_params()),
                         [](const ::testing::TestParamInfo<BatchParam>& i) {
                           return i.param.variant + "_" + format_name(i.param.format);
                         });

TEST(Mxfp4, ValuesQuantizeAndDequantize) {
  // Every code at every scale: exact (value * 2**(127 - s) recovers the e2m1 value) or inf.
  for (int s = 0; s < 255; ++s)
    for (int c = 0; c < 16; ++c) {
      const double want = std::ldexp(0.5 * mxfp4::kTwice[c], s - 127);
      const float got = mxfp4::value(uint8_t(c), uint8_t(s));
      if (std::fabs(want) > 3.3895313892515355e38)
        EXPECT_TRUE(std::isinf(got)) << c << " " << s;
      else
        EXPECT_EQ(double(got), want) << c << " " << s;
      EXPECT_EQ(bf16_to_f32(f32_to_bf16(got)), got) << "exact in bf16: " << c << " " << s;
      // Codes 8-15 are negative, code 8 the zero -0 (what every decode must give too).
      EXPECT_EQ(std::signbit(got), c >= 8) << c << " " << s;
    }
  // quantize(dequantize(q)) == q for finite blocks; quantize picks the OCP scale.
  std::mt19937 rng(5);
  std::vector<bf16_t> w = random_bf16(64 * 32, 3.0f, rng);
  std::vector<uint8_t> b(64 * 16), s(64), b2(64 * 16), s2(64);
  mxfp4::quantize(w.data(), 64, 32, b.data(), s.data());
  std::vector<bf16_t> d(64 * 32);
  mxfp4::dequantize(b.data(), s.data(), 64, 32, d.data());
  mxfp4::quantize(d.data(), 64, 32, b2.data(), s2.data());
  EXPECT_EQ(b, b2);
  EXPECT_EQ(s, s2);
  for (size_t q = 0; q < w.size(); ++q)  // within half a step of the block's grid
    EXPECT_LE(std::fabs(bf16_to_f32(w[q]) - bf16_to_f32(d[q])),
              0.5 * std::ldexp(2.0, s[q / 32] - 127) + 1e-30);
}

TEST(Mxfp4, ValidationNamesTheArgument) {
  std::vector<uint8_t> blocks(2 * 3 * 2 * 16, 0x21), scales(2 * 3 * 2, 127);
  EXPECT_EQ(error_of([&] { prepare_mxfp4(blocks.data(), scales.data(), 2, 3, 48, ""); })
                .rfind("i:", 0), 0u);
  EXPECT_EQ(error_of([&] { prepare_mxfp4(blocks.data(), scales.data(), 2, 3, 0, ""); })
                .rfind("w:", 0), 0u);
  scales[7] = 255;
  const std::string msg =
      error_of([&] { prepare_mxfp4(blocks.data(), scales.data(), 2, 3, 64, "reference"); });
  EXPECT_EQ(msg.rfind("scales:", 0), 0u) << msg;
  EXPECT_NE(msg.find("expert 1, row 0, block 1"), std::string::npos) << msg;
  scales[7] = 254;
  auto p = prepare_mxfp4(blocks.data(), scales.data(), 2, 3, 64, "reference");
  EXPECT_EQ(p->format, WeightFormat::kMxfp4);
  EXPECT_EQ(parse_format("mxfp4"), WeightFormat::kMxfp4);
  EXPECT_EQ(error_of([] { parse_format("int4"); }).rfind("format:", 0), 0u);
}

}  // namespace
}  // namespace cpukern::moe
