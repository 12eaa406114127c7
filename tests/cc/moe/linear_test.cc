// moe::linear (a dense layer on the fused-MoE micro-kernels), on every variant this CPU runs
// (the SIMDe build: the SIMDe rows), every weight format, over ragged shapes:
//   bf16: within the bound of a float64 model (bf16 output rounding + fp32 summation);
//   mxfp4: bitwise equal to bf16 on the dequantized weights (the format's contract);
//   int8 / mxfp4_a8: bitwise equal to the reference variant (their contract);
//   every format: the same bits for 1, 2 and 3 threads and for each row run alone;
// the op "linear" (its registry holds fused_moe's rows under its own name);
// and validation that names the argument and leaves the output alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/common/bf16.h"
#include "kernels/common/errors.h"
#include "kernels/moe/int8.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernel.h"
#include "tests/cc/common/variant_params.h"
#include "tests/cc/moe/list_rows.h"

namespace cpukern::moe {
namespace {

// The kernel list's row `name` (list_rows.h; the simde lines too).
const Variant& test_row(const std::string& name) {
  return *cpukern::testing::find_test_variant(list_rows(), simde_variants(), name);
}

std::vector<bf16_t> random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<bf16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

bool same_bits(const std::vector<bf16_t>& a, const std::vector<bf16_t>& b) {
  // (empty vectors may hold null pointers, which memcmp must not get even for 0 bytes)
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 2) == 0);
}

struct Shape {
  int64_t t, o, k;
  bool bias;
};

// Ragged o and k against every tile (nr 8..32, kr 2..8, blocks of 32), one row, one output,
// empty batches, and a prefill-sized batch (several row blocks and K blocks).
const Shape kShapes[] = {{1, 1, 32, false},   {1, 37, 64, true},    {3, 100, 96, false},
                         {5, 64, 288, true},   {0, 16, 32, true},    {17, 129, 160, true},
                         {1, 300, 2880, false}, {40, 70, 544, true}, {2, 33, 1, false},
                         {9, 5, 7, true}};

using Param = std::tuple<std::string, std::string>;  // variant, format

class LinearTest : public ::testing::TestWithParam<Param> {};

struct Packed {
  std::shared_ptr<const PackedExperts> w;
  std::vector<float> wf;  // the weights the format represents (float), (o, k)
};

Packed pack(const std::string& isa, const std::string& format, const std::vector<bf16_t>& w,
            int64_t o, int64_t k) {
  Packed p;
  p.wf.resize(size_t(o * k));
  if (format == "bf16") {
    p.w = prepare(w.data(), 1, o, k, test_row(isa));
    for (size_t j = 0; j < w.size(); ++j) p.wf[j] = bf16_to_f32(w[j]);
  } else if (format == "int8") {
    std::vector<int8_t> q(static_cast<size_t>(o * k));
    std::vector<float> s(static_cast<size_t>(o));
    int8::quantize_weights(w.data(), o, k, q.data(), s.data());
    p.w = prepare_int8(q.data(), s.data(), 1, o, k, test_row(isa));
    int8::dequantize(q.data(), s.data(), o, k, p.wf.data());
  } else {
    std::vector<uint8_t> blocks(size_t(o * k / 2)), scales(size_t(o * k / 32));
    mxfp4::quantize(w.data(), o, k, blocks.data(), scales.data());
    p.w = prepare_mxfp4(blocks.data(), scales.data(), 1, o, k, test_row(isa), parse_format(format));
    std::vector<bf16_t> d(size_t(o * k));
    mxfp4::dequantize(blocks.data(), scales.data(), o, k, d.data());
    for (size_t j = 0; j < d.size(); ++j) p.wf[j] = bf16_to_f32(d[j]);
  }
  return p;
}

std::vector<bf16_t> run(const std::vector<bf16_t>& x, const Shape& s, const PackedExperts& w,
                        const std::vector<bf16_t>& bias, int threads) {
  std::vector<bf16_t> out(size_t(s.t * s.o), bf16_t(0x7fc1));  // NaN: every element is written
  linear(x.data(), s.t, s.k, w, s.bias ? bias.data() : nullptr, threads, out.data());
  return out;
}

TEST_P(LinearTest, MatchesModelAndIsThreadAndBatchInvariant) {
  const auto& [name, format] = GetParam();
  const Variant* v = cpukern::testing::find_test_variant(list_rows(), simde_variants(), name);
  ASSERT_NE(v, nullptr);
  CPUKERN_SKIP_IF_UNSUPPORTED(*v);
  const bool mx = format == "mxfp4" || format == "mxfp4_a8";
  std::mt19937 rng(7);
  int checked = 0;
  for (const Shape& s : kShapes) {
    if (mx && s.k % 32) continue;  // MXFP4 blocks are 32 along k
    SCOPED_TRACE("t=" + std::to_string(s.t) + " o=" + std::to_string(s.o) +
                 " k=" + std::to_string(s.k));
    const auto x = random_bf16(size_t(s.t * s.k), 2.0f, rng);
    const auto w = random_bf16(size_t(s.o * s.k), 1.0f, rng);
    const auto bias = random_bf16(size_t(s.o), 1.0f, rng);
    const Packed p = pack(name, format, w, s.o, s.k);
    const auto y = run(x, s, *p.w, bias, 1);
    for (int threads : {2, 3}) EXPECT_TRUE(same_bits(y, run(x, s, *p.w, bias, threads)));
    // Each row alone gives the same bits as in the batch; on a row with AMX tiles, which run
    // for calls of more than tiles_min_rows rows (ukernel_for_call), a batch that runs them
    // is compared with chunks of min + 1 rows instead (the last one ending at t).
    const Ukernel& u = *p.w->ukernel;
    const bool tiles = &ukernel_for_call(u, s.t, 1) != &u;
    const int64_t n = tiles ? u.tiles_min_rows + 1 : 1;
    for (int64_t r = 0; r < s.t; r += n) {
      const int64_t r0 = std::min(r, s.t - n);
      const std::vector<bf16_t> xr(x.begin() + r0 * s.k, x.begin() + (r0 + n) * s.k);
      const auto yr = run(xr, {n, s.o, s.k, s.bias}, *p.w, bias, 2);
      ASSERT_EQ(std::memcmp(yr.data(), y.data() + r0 * s.o, size_t(n * s.o) * 2), 0)
          << "rows [" << r0 << ", " << r0 + n << ")" << (tiles ? " (tiles)" : "");
    }
    if (format == "bf16") {
      for (int64_t r = 0; r < s.t; ++r)
        for (int64_t c = 0; c < s.o; ++c) {
          double ref = s.bias ? bf16_to_f32(bias[c]) : 0.0, mag = std::fabs(ref);
          for (int64_t j = 0; j < s.k; ++j) {
            const double xw = double(bf16_to_f32(x[r * s.k + j])) * p.wf[c * s.k + j];
            ref += xw;
            mag += std::fabs(xw);
          }
          // bf16 output rounding (half an ulp: 2**-9 relative) + fp32 sums (k steps of 2**-24)
          const double bound = std::ldexp(std::fabs(ref), -8) + double(s.k + 1) * std::ldexp(mag, -23) + 1e-30;
          ASSERT_LE(std::fabs(bf16_to_f32(y[r * s.o + c]) - ref), bound) << "r=" << r << " c=" << c;
        }
    } else if (format == "mxfp4") {  // exactly the bf16 kernel on the dequantized weights
      std::vector<bf16_t> wd(p.wf.size());
      for (size_t j = 0; j < wd.size(); ++j) wd[j] = f32_to_bf16(p.wf[j]);
      EXPECT_TRUE(same_bits(y, run(x, s, *prepare(wd.data(), 1, s.o, s.k, *v), bias, 1)));
    } else {  // int8 / mxfp4_a8: every variant gives the reference's bits
      const Packed ref = pack("reference", format, w, s.o, s.k);
      EXPECT_TRUE(same_bits(y, run(x, s, *ref.w, bias, 1)));
    }
    ++checked;
  }
  EXPECT_GT(checked, 5);
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (const auto& n : cpukern::testing::test_variant_names(list_rows(), simde_variants()))
    for (const char* f : {"bf16", "mxfp4", "mxfp4_a8", "int8"}) out.emplace_back(n, f);
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, LinearTest, ::testing::ValuesIn(params()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

// The message names the argument; nothing is written on error.
void expect_arg_error(const std::string& arg, const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "no error, expected one naming " << arg;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind(arg + ":", 0), 0u) << e.what();
  }
}

TEST(LinearValidation, NamesTheArgumentAndLeavesOutputAlone) {
  std::mt19937 rng(1);
  const auto w = random_bf16(2 * 16 * 8, 1.0f, rng);
  const auto x = random_bf16(3 * 8, 1.0f, rng);
  const auto two = prepare(w.data(), 2, 16, 8, "");
  const auto one = prepare(w.data(), 1, 16, 8, "");
  std::vector<bf16_t> out(3 * 16, bf16_t(0x1234));
  expect_arg_error("w", [&] { linear(x.data(), 3, 8, *two, nullptr, 1, out.data()); });
  expect_arg_error("x", [&] { linear(x.data(), 3, 7, *one, nullptr, 1, out.data()); });
  expect_arg_error("x", [&] { linear(x.data(), -1, 8, *one, nullptr, 1, out.data()); });
  expect_arg_error("x", [&] { linear(nullptr, 3, 8, *one, nullptr, 1, out.data()); });
  expect_arg_error("out", [&] { linear(x.data(), 3, 8, *one, nullptr, 1, nullptr); });
  expect_arg_error("threads", [&] { linear(x.data(), 3, 8, *one, nullptr, -1, out.data()); });
  // out overlapping an input or the packed weights' memory
  std::vector<bf16_t> xo(3 * 16 + 8, bf16_t(0x1234));
  std::copy(x.begin(), x.end(), xo.begin());
  expect_arg_error("out", [&] { linear(xo.data(), 3, 8, *one, nullptr, 1, xo.data() + 8); });
  expect_arg_error("out", [&] {
    auto* packed = reinterpret_cast<bf16_t*>(const_cast<char*>(one->packed()));
    linear(x.data(), 1, 8, *one, nullptr, 1, packed);
  });
  for (bf16_t b : out) ASSERT_EQ(b, bf16_t(0x1234));
  linear(x.data(), 0, 8, *one, nullptr, 1, nullptr);  // no rows: nothing read or written
}

// Near fp32's underflow threshold. vdpbf16ps (avx512_bf16) treats bf16 subnormal inputs as
// zero and flushes products and sums below 2**-126 to zero, so the documented bound has an
// underflow term: |y - ref| <= 2**-8 |ref| + (K + 1) 2**-23 (sum_k |x_k w_k| + |b|)
//                              + 2**-126 (2K + 2 + sum_k (|x_k| + |w_k|)).
// The exact answers here are normal floats (40 * 2**-127, about 2.4e-37) made of products
// below 2**-126, or of bf16 subnormal activations: a flushing kernel returns 0 for them.
class LinearUnderflowTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LinearUnderflowTest, WithinTheBoundWithItsUnderflowTerm) {
  const Variant* v =
      cpukern::testing::find_test_variant(list_rows(), simde_variants(), GetParam());
  ASSERT_NE(v, nullptr);
  CPUKERN_SKIP_IF_UNSUPPORTED(*v);
  constexpr int64_t t = 4, o = 3, k = 40;
  std::vector<float> xf(t * k), wf(o * k);
  for (int64_t j = 0; j < k; ++j) {
    xf[0 * k + j] = std::ldexp(1.0f, -60);                      // products 2**-127
    xf[1 * k + j] = std::ldexp(1.0f, -130);                     // bf16 subnormal
    xf[2 * k + j] = std::ldexp(j % 2 ? -1.0f : 1.5f, -61);      // mixed signs
    xf[3 * k + j] = j < 8 ? std::ldexp(1.0f, -60) : 1.0f;       // tiny next to normal
    wf[0 * k + j] = std::ldexp(1.0f, -67);
    wf[1 * k + j] = std::ldexp(1.0f, 10);
    wf[2 * k + j] = std::ldexp(j < 8 ? 1.0f : 0.0f, -67);
  }
  std::vector<bf16_t> x(xf.size()), w(wf.size()), y(t * o);
  for (size_t j = 0; j < xf.size(); ++j) x[j] = f32_to_bf16(xf[j]);
  for (size_t j = 0; j < wf.size(); ++j) w[j] = f32_to_bf16(wf[j]);
  const auto p = prepare(w.data(), 1, o, k, test_row(GetParam()));
  linear(x.data(), t, k, *p, nullptr, 1, y.data());
  for (int64_t r = 0; r < t; ++r)
    for (int64_t c = 0; c < o; ++c) {
      double ref = 0, mag = 0, sum_abs = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double xv = bf16_to_f32(x[r * k + j]), wv = bf16_to_f32(w[c * k + j]);
        ref += xv * wv;
        mag += std::fabs(xv * wv);
        sum_abs += std::fabs(xv) + std::fabs(wv);
      }
      const double bound = std::ldexp(std::fabs(ref), -8) + double(k + 1) * std::ldexp(mag, -23) +
                           std::ldexp(2.0 * k + 2 + sum_abs, -126);
      EXPECT_LE(std::fabs(bf16_to_f32(y[r * o + c]) - ref), bound)
          << "r=" << r << " c=" << c << " ref=" << ref << " got=" << bf16_to_f32(y[r * o + c]);
    }
}

// The op "linear": fused_moe's rows (names, features, priorities, micro-kernels, AMX
// thresholds) under its own name; linear_variant resolves in it and names linear in its errors.
TEST(LinearOp, HasTheFusedMoeRowsUnderItsOwnName) {
  EXPECT_EQ(linear_registry().op(), "linear");
  EXPECT_EQ(linear_registry().names(), registry().names());
  const auto dense = list_linear_variants(), moe = list_variants();
  ASSERT_EQ(dense.size(), moe.size());
  ASSERT_FALSE(dense.empty());
  for (size_t r = 0; r < dense.size(); ++r) {
    EXPECT_EQ(dense[r].name, moe[r].name);
    EXPECT_EQ(dense[r].ukernel, moe[r].ukernel);
    EXPECT_EQ(dense[r].required, moe[r].required);
    EXPECT_EQ(dense[r].priority, moe[r].priority);
    EXPECT_EQ(dense[r].supported, moe[r].supported);
    EXPECT_EQ(dense[r].tiles_min_rows, moe[r].tiles_min_rows);
  }
  EXPECT_EQ(linear_variant(""), linear_registry().default_variant().name);
  EXPECT_EQ(linear_variant("reference"), "reference");
  try {
    linear_variant("no_such_variant");
    ADD_FAILURE() << "no error for an unknown variant";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("variant:", 0), 0u) << what;
    EXPECT_NE(what.find("for linear"), std::string::npos) << what;
  }
  // A dense layer packed for linear's row runs and reports that row.
  const bf16_t w[2] = {f32_to_bf16(1.0f), f32_to_bf16(2.0f)};
  const auto p = prepare(w, 1, 1, 2, linear_variant(""));
  EXPECT_EQ(p->isa, linear_variant(""));
  EXPECT_EQ(p->op, "moe");
  bf16_t y = 0;
  linear(w, 1, 2, *p, nullptr, 1, &y);
  EXPECT_EQ(bf16_to_f32(y), 5.0f);
}

INSTANTIATE_TEST_SUITE_P(
    All, LinearUnderflowTest,
    ::testing::ValuesIn(cpukern::testing::test_variant_names(list_rows(), simde_variants())));

}  // namespace
}  // namespace cpukern::moe
