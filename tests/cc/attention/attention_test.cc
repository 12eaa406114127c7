// Tests of decode attention: every row of the kernel list against a float64 model on random
// and edge shapes (ragged D and L, L = 0 and 1, chunk edges, GQA groups of 1..8), masks (bool,
// float, shared or per head, broadcast over the batch), sinks, strided caches, rows with every
// key masked out, NaN, thread-count invariance, and refused arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/common/bf16.h"
#include "kernels/common/errors.h"
#include "tests/cc/attention/list_rows.h"
#include "tests/cc/common/variant_params.h"

namespace cpukern::attention {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  int64_t b = 1, hq = 4, hkv = 1, len = 16, d = 16;
  Dtype dtype = Dtype::kF32;
  MaskKind mask = MaskKind::kNone;
  bool mask_per_head = false, mask_per_batch = false, sinks = false, nan_if_empty = false;
  int64_t cache_len = 0;  // > len: keys and values inside a longer cache (strided heads)
  float masked_share = 0.3f;
};

// Values stored as the kernels read them (bf16 or float32) and their float copies.
struct Tensor {
  std::vector<float> f;
  std::vector<bf16_t> h;
  Dtype t;
  const void* data() const { return t == Dtype::kF32 ? (const void*)f.data() : (const void*)h.data(); }
};

Tensor random_tensor(size_t n, Dtype t, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  Tensor x{std::vector<float>(n), std::vector<bf16_t>(n), t};
  for (size_t i = 0; i < n; ++i) {
    x.f[i] = dist(rng);
    x.h[i] = f32_to_bf16(x.f[i]);
    if (t == Dtype::kBf16) x.f[i] = bf16_to_f32(x.h[i]);
  }
  return x;
}

struct Inputs {
  Case c;
  Tensor q, k, v;
  std::vector<uint8_t> mask_bool;
  std::vector<float> mask_f32;
  std::vector<float> sinks;
  int64_t mb = 1, mh = 1;
};

Inputs make_inputs(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.c = c;
  const int64_t cl = std::max(c.cache_len, c.len);
  in.q = random_tensor(size_t(c.b * c.hq * c.d), c.dtype, rng, 1.0f);
  in.k = random_tensor(size_t(c.b * c.hkv * cl * c.d), c.dtype, rng, 1.0f);
  in.v = random_tensor(size_t(c.b * c.hkv * cl * c.d), c.dtype, rng, 1.0f);
  in.mb = c.mask_per_batch ? c.b : 1;
  in.mh = c.mask_per_head ? c.hq : 1;
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const size_t nm = size_t(in.mb * in.mh * c.len);
  in.mask_bool.resize(nm);
  in.mask_f32.resize(nm);
  for (size_t i = 0; i < nm; ++i) {
    const bool keep = u(rng) >= c.masked_share;
    in.mask_bool[i] = keep;
    in.mask_f32[i] = keep ? (u(rng) < 0.5f ? 0.0f : u(rng) * 2.0f - 1.0f) : -kInf;
  }
  if (c.sinks) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int64_t h = 0; h < c.hq; ++h) in.sinks.push_back(dist(rng));
  }
  return in;
}

DecodeArgs args_of(const Inputs& in, std::vector<char>& out) {
  const Case& c = in.c;
  const int64_t cl = std::max(c.cache_len, c.len);
  DecodeArgs a;
  a.batch = c.b, a.q_heads = c.hq, a.kv_heads = c.hkv, a.length = c.len, a.head_dim = c.d;
  a.dtype = c.dtype;
  a.q = in.q.data(), a.k = in.k.data(), a.v = in.v.data();
  a.k_stride[0] = a.v_stride[0] = c.hkv * cl * c.d;
  a.k_stride[1] = a.v_stride[1] = cl * c.d;
  a.k_stride[2] = a.v_stride[2] = c.d;
  a.mask_kind = c.mask;
  a.mask = c.mask == MaskKind::kBool ? (const void*)in.mask_bool.data()
                                     : (const void*)in.mask_f32.data();
  a.mask_stride[0] = c.mask_per_batch ? in.mh * c.len : 0;
  a.mask_stride[1] = c.mask_per_head ? c.len : 0;
  a.mask_stride[2] = 1;
  a.sinks = c.sinks ? in.sinks.data() : nullptr;
  a.scale = 1.0f / std::sqrt(float(c.d));
  a.nan_if_empty = c.nan_if_empty;
  out.assign(size_t(c.b * c.hq * c.d) * (c.dtype == Dtype::kF32 ? 4 : 2), 0);
  a.out = out.data();
  return a;
}

std::vector<float> out_floats(const std::vector<char>& out, Dtype t) {
  std::vector<float> r(out.size() / (t == Dtype::kF32 ? 4 : 2));
  for (size_t i = 0; i < r.size(); ++i) {
    if (t == Dtype::kF32) {
      std::memcpy(&r[i], out.data() + 4 * i, 4);
    } else {
      bf16_t h;
      std::memcpy(&h, out.data() + 2 * i, 2);
      r[i] = bf16_to_f32(h);
    }
  }
  return r;
}

// The float64 model of attention.h's formula.
std::vector<double> reference(const Inputs& in) {
  const Case& c = in.c;
  const int64_t cl = std::max(c.cache_len, c.len), g = c.hq / c.hkv;
  const double scale = double(1.0f / std::sqrt(float(c.d)));
  std::vector<double> out(size_t(c.b * c.hq * c.d));
  for (int64_t b = 0; b < c.b; ++b)
    for (int64_t h = 0; h < c.hq; ++h) {
      const int64_t kv = h / g;
      std::vector<double> s(size_t(c.len));
      double top = -INFINITY;
      for (int64_t j = 0; j < c.len; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < c.d; ++e)
          dot += double(in.q.f[(b * c.hq + h) * c.d + e]) *
                 double(in.k.f[((b * c.hkv + kv) * cl + j) * c.d + e]);
        s[j] = dot * scale;
        const int64_t mi = ((c.mask_per_batch ? b : 0) * in.mh + (c.mask_per_head ? h : 0)) * c.len + j;
        if (c.mask == MaskKind::kBool && !in.mask_bool[mi]) s[j] = -INFINITY;
        if (c.mask == MaskKind::kF32) s[j] += in.mask_f32[mi];
        top = std::max(top, s[j]);
      }
      const double sink = c.sinks ? in.sinks[h] : -INFINITY;
      top = std::max(top, sink);
      double* o = &out[(b * c.hq + h) * c.d];
      if (top == -INFINITY) {
        for (int64_t e = 0; e < c.d; ++e) o[e] = c.nan_if_empty && !c.sinks ? NAN : 0.0;
        continue;
      }
      double denom = c.sinks ? std::exp(sink - top) : 0.0;
      for (int64_t j = 0; j < c.len; ++j) {
        const double p = s[j] == -INFINITY ? 0.0 : std::exp(s[j] - top);
        denom += p;
        for (int64_t e = 0; e < c.d; ++e) o[e] += p * in.v.f[((b * c.hkv + kv) * cl + j) * c.d + e];
      }
      for (int64_t e = 0; e < c.d; ++e) o[e] /= denom;
    }
  return out;
}

class Rows : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    row_ = ::cpukern::testing::find_test_variant(list_rows(), std::vector<Variant>{}, GetParam());
    ASSERT_NE(row_, nullptr);
    CPUKERN_SKIP_IF_UNSUPPORTED(*row_);
  }
  // Runs the row on `threads` threads and compares with the model: |out - ref| within
  // 1e-5 of the largest |v| (float32 sums), plus half a bf16 step of |ref| for bf16 output.
  std::vector<float> check(const Case& c, uint32_t seed, int threads = 1) {
    const Inputs in = make_inputs(c, seed);
    std::vector<char> out;
    const DecodeArgs a = args_of(in, out);
    decode(a, row_->name, threads);
    const std::vector<float> got = out_floats(out, c.dtype);
    const std::vector<double> want = reference(in);
    double vmax = 0;
    for (float x : in.v.f) vmax = std::max(vmax, double(std::fabs(x)));
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
        continue;
      }
      const double tol = 1e-5 * vmax + (c.dtype == Dtype::kBf16 ? std::fabs(want[i]) / 256 : 0);
      EXPECT_NEAR(got[i], want[i], tol)
          << "element " << i << " of B=" << c.b << " Hq=" << c.hq << " Hkv=" << c.hkv
          << " L=" << c.len << " D=" << c.d << " bf16=" << (c.dtype == Dtype::kBf16);
      if (::testing::Test::HasFailure()) break;
    }
    return got;
  }
  const Variant* row_ = nullptr;
};

TEST_P(Rows, RandomShapes) {
  uint32_t seed = 1;
  for (Dtype t : {Dtype::kF32, Dtype::kBf16})
    for (int64_t d : {1, 3, 16, 17, 64, 128})
      for (int64_t len : {1, 15, 16, 17, 255, 256, 257, 600})
        for (int64_t g : {1, 3, 4, 5, 8}) {
          Case c;
          c.dtype = t, c.d = d, c.len = len, c.hkv = 2, c.hq = 2 * g, c.b = (len % 2) + 1;
          check(c, seed++);
          if (HasFailure()) return;
        }
}

TEST_P(Rows, MasksAndSinks) {
  uint32_t seed = 100;
  for (Dtype t : {Dtype::kF32, Dtype::kBf16})
    for (MaskKind m : {MaskKind::kBool, MaskKind::kF32})
      for (int variant = 0; variant < 8; ++variant) {
        Case c;
        c.dtype = t, c.mask = m, c.b = 2, c.hq = 8, c.hkv = 2, c.d = 64, c.len = 300;
        c.mask_per_head = variant & 1, c.mask_per_batch = variant & 2, c.sinks = variant & 4;
        check(c, seed++);
        if (HasFailure()) return;
      }
}

TEST_P(Rows, StridedCache) {
  Case c;
  c.b = 2, c.hq = 6, c.hkv = 3, c.d = 32, c.len = 70, c.cache_len = 128, c.dtype = Dtype::kBf16;
  check(c, 7);
}

TEST_P(Rows, NoKeysLeft) {
  for (int64_t len : {0, 5, 300})
    for (bool sinks : {false, true})
      for (bool nan : {false, true}) {
        Case c;
        c.len = len, c.mask = MaskKind::kBool, c.masked_share = 1.0f, c.sinks = sinks;
        c.nan_if_empty = nan, c.hq = 4, c.hkv = 2;
        const std::vector<float> got = check(c, 11);
        for (float x : got) ASSERT_EQ(std::isnan(x), nan && !sinks) << len << " " << x;
        if (!nan || sinks) {
          for (float x : got) ASSERT_EQ(x, 0.0f);
        }
      }
}

TEST_P(Rows, NaNPropagates) {
  Case c;
  c.len = 300, c.hq = 4, c.hkv = 1, c.d = 16;
  Inputs in = make_inputs(c, 3);
  in.k.f[5 * c.d + 2] = NAN;  // key 5
  std::vector<char> out;
  decode(args_of(in, out), row_->name, 1);
  for (float x : out_floats(out, c.dtype)) ASSERT_TRUE(std::isnan(x));
}

TEST_P(Rows, SameBitsForAnyThreadCount) {
  Case c;
  c.b = 3, c.hq = 12, c.hkv = 3, c.d = 128, c.len = 777, c.mask = MaskKind::kF32, c.sinks = true;
  for (Dtype t : {Dtype::kF32, Dtype::kBf16}) {
    c.dtype = t;
    const std::vector<float> one = check(c, 21, 1);
    for (int threads : {2, 3}) {
      const std::vector<float> more = check(c, 21, threads);
      ASSERT_EQ(std::memcmp(one.data(), more.data(), one.size() * 4), 0) << threads;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, Rows,
                         ::testing::ValuesIn(::cpukern::testing::test_variant_names(
                             list_rows(), std::vector<Variant>{})));

TEST(Decode, RefusesBadSizes) {
  DecodeArgs a;
  a.batch = 1, a.q_heads = 3, a.kv_heads = 2, a.length = 1, a.head_dim = 4;
  EXPECT_THROW(decode(a, "", 1), InvalidArgument);
  a.q_heads = 4, a.head_dim = 0;
  EXPECT_THROW(decode(a, "", 1), InvalidArgument);
  a.head_dim = 4;
  EXPECT_THROW(decode(a, "no_such_variant", 1), InvalidArgument);
}

TEST(Decode, RegistryHasEveryRowOfThisArch) {
  EXPECT_EQ(list_variants().size(), list_rows().size());
  int selected = 0;
  for (const VariantInfo& v : list_variants()) selected += v.selected;
  EXPECT_EQ(selected, 1);
}

}  // namespace
}  // namespace cpukern::attention
