// W4A8 (MXFP4 weights, int8 activations; kernels/moe/w4a8_loop.h): every variant's W4A8
// micro-kernel (the kernel list's w4a8 column; with CPUKERN_TEST_SIMDE the SIMDe rows) against
// a model of the arithmetic written here from the contract, bit for bit, and so against the
// scalar oracle: every row count 1..17, ragged o, K of one block to past 2880, e8m0 scales 0,
// 1, 127, 254 and columns whose blocks lie more than 2**126 apart (flushed), activation rows
// with the quantiser's edges (zero, tiny, huge, NaN), a sub-range of panels, both C modes.
// fused_moe on W4A8 experts: empty batches, prepare validation, the format's name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/bf16.h"
#include "kernels/common/errors.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/ukernel.h"
#include "tests/cc/common/variant_params.h"
#include "tests/cc/moe/list_rows.h"

namespace cpukern::moe {
namespace {

std::vector<std::string> variant_names() {
  return cpukern::testing::test_variant_names(list_rows(), simde_variants());
}

const Variant& test_variant(const std::string& name) {
  const Variant* v = cpukern::testing::find_test_variant(list_rows(), simde_variants(), name);
  if (!v) throw std::runtime_error("no variant " + name);
  return *v;
}

// The activation quantiser's contract (int8.h), stated again here.
float model_quantize_row(const bf16_t* x, int64_t k, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t j = 0; j < k; ++j) {
    const float v = std::fabs(bf16_to_f32(x[j]));
    finite &= std::isfinite(v);
    amax = std::max(amax, v);
  }
  if (!finite || amax == 0.0f) {
    for (int64_t j = 0; j < k; ++j) q[j] = 0;  // std::fill: GCC 12 -O1 warns of a bound past SIZE_MAX
    return finite ? 0.0f : std::nanf("");
  }
  const float pre = amax < std::ldexp(1.0f, -64) ? std::ldexp(1.0f, 64) : 1.0f;
  const float inv = 127.0f / (amax * pre);
  for (int64_t j = 0; j < k; ++j) {
    volatile float v = (bf16_to_f32(x[j]) * pre) * inv;
    q[j] = int8_t(std::max(-127.0f, std::min(127.0f, std::nearbyint(float(v)))));
  }
  return amax / 127.0f;
}

// 2 * e2m1(code): sign bit 3, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
int twice_e2m1(int code) {
  static const int mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return code & 8 ? -mag[code & 7] : mag[code & 7];
}

// The contract for one output: row qa/sa, column's blocks (nb * 16 bytes) and scales (nb).
float model_output(const int8_t* qa, float sa, const uint8_t* blocks, const uint8_t* e,
                   int64_t nb) {
  const int emax = *std::max_element(e, e + nb);
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0;
    for (int kk = 0; kk < 32; ++kk)
      isum += int32_t(qa[b * 32 + kk]) * twice_e2m1((blocks[b * 16 + kk / 2] >> (4 * (kk % 2))) & 15);
    const int d = emax - e[b];
    const float mult = d <= 126 ? std::ldexp(1.0f, -d) : 0.0f;
    acc = std::fma(float(isum), mult, acc);
  }
  return float(double(acc) * double(sa) * std::ldexp(1.0, emax - 128));
}

std::vector<bf16_t> rows_with_edges(int64_t m, int64_t k, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<bf16_t> a(size_t(m * k));
  for (auto& x : a) x = f32_to_bf16(d(rng));
  for (int64_t r = 0; r < m; ++r) {
    bf16_t* row = a.data() + r * k;
    switch (r % 8) {
      case 1: std::fill(row, row + k, bf16_t(0)); break;
      case 2: for (int64_t j = 0; j < k; ++j) row[j] = f32_to_bf16(j % 2 ? 127.0f : -127.0f); break;
      case 3: for (int64_t j = 0; j < k; ++j) row[j] = f32_to_bf16(bf16_to_f32(row[j]) * 3e38f); break;
      case 4: for (int64_t j = 0; j < k; ++j) row[j] = f32_to_bf16(bf16_to_f32(row[j]) * 1e-30f); break;
      case 5: for (int64_t j = 0; j < k; ++j) row[j] = f32_to_bf16(bf16_to_f32(row[j]) * 1e-39f); break;
      case 7: if (r == 7) row[k / 2] = f32_to_bf16(std::nanf("")); break;
      default: break;
    }
  }
  return a;
}

// MXFP4 weights (o, k) with random codes; scales: case 0 random in [100, 140]; 1: the extremes
// 0, 1, 127, 254 mixed in each column; 2: per column one block at 254 and the others far
// below (more than 126 apart: flushed), plus all-zero codes in some blocks.
void make_weights(int64_t o, int64_t k, int scales_case, std::mt19937& rng,
                  std::vector<uint8_t>& blocks, std::vector<uint8_t>& e) {
  const int64_t nb = k / 32;
  blocks.resize(size_t(o * nb * 16));
  e.resize(size_t(o * nb));
  for (auto& b : blocks) b = uint8_t(rng());
  static const uint8_t ex[] = {0, 1, 127, 254};
  for (int64_t n = 0; n < o; ++n)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t& s = e[size_t(n * nb + b)];
      switch (scales_case) {
        case 0: s = uint8_t(100 + rng() % 41); break;
        case 1: s = ex[rng() % 4]; break;
        default:
          s = b == n % nb ? 254 : uint8_t(rng() % 130);
          if (b % 3 == 2) std::fill_n(blocks.begin() + (n * nb + b) * 16, 16, uint8_t(0x88));
      }
    }
}

bool same_bits(float x, float y) {
  return std::memcmp(&x, &y, 4) == 0 || (std::isnan(x) && std::isnan(y));
}

class MoeW4a8UkernelTest : public ::testing::TestWithParam<std::string> {};
TEST_P(MoeW4a8UkernelTest, GemmEqualsTheContractBitwise) {
  const Variant& v = test_variant(GetParam());
  CPUKERN_SKIP_IF_UNSUPPORTED(v);
  const Ukernel& uk = ukernel_for(v, WeightFormat::kMxfp4A8);
  ASSERT_EQ(uk.format, WeightFormat::kMxfp4A8) << uk.name;
  ASSERT_NE(uk.pack, nullptr);
  const bool qemu = std::getenv("CPUKERN_QEMU_CPU") != nullptr;
  std::mt19937 rng(28);
  const std::vector<int64_t> ks = qemu ? std::vector<int64_t>{32, 96, 2880}
                                       : std::vector<int64_t>{32, 64, 96, 320, 2880};
  int checked = 0;
  for (int64_t o : {1, 13, 37, 70})
  for (int64_t k : ks)
  for (int sc = 0; sc < 3; ++sc)
  for (int64_t m = 1; m <= 17; ++m) {
    if (k >= 320 && m % 4 != 1 && m != 8) continue;
    if (qemu && m > 9) continue;
    const int64_t nb = k / 32;
    std::vector<uint8_t> blocks, e;
    make_weights(o, k, sc, rng, blocks, e);
    const auto a = rows_with_edges(m, k, rng);
    std::vector<char> wp(size_t(uk.packed_size(o, k)));
    uk.pack({blocks.data(), e.data()}, o, k, wp.data());
    std::vector<char> ap(size_t(uk.packed_a_size(m, k)));
    uk.pack_a(a.data(), k, nullptr, m, k, ap.data());
    std::vector<int8_t> qa(static_cast<size_t>(m * k));
    std::vector<float> sa(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) sa[r] = model_quantize_row(a.data() + r * k, k, qa.data() + r * k);
    const int64_t p0 = o > uk.nr ? 1 : 0, p1 = (o + uk.nr - 1) / uk.nr;
    const int64_t ldc = (p1 - p0) * uk.nr + 3;
    for (bool acc : {false, true}) {
      std::vector<float> c(size_t(m * ldc), acc ? 0.25f : std::nanf(""));
      uk.gemm(ap.data(), m, k, wp.data(), p0, p1, c.data(), ldc, acc);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t col = 0; col < (p1 - p0) * uk.nr; ++col) {
          const int64_t n = p0 * uk.nr + col;
          if (n >= o) continue;  // padding columns: unspecified
          float want = model_output(qa.data() + r * k, sa[r], blocks.data() + n * nb * 16,
                                    e.data() + n * nb, nb);
          if (acc) want = 0.25f + want;
          const float got = c[size_t(r * ldc + col)];
          ASSERT_TRUE(same_bits(got, want))
              << uk.name << ": o=" << o << " k=" << k << " scales case " << sc << " m=" << m
              << " r=" << r << " col=" << n << " got " << got << " want " << want
              << " accumulate=" << acc;
          ++checked;
        }
      // Columns outside [p0, p1) are not written.
      for (int64_t r = 0; r < m; ++r)
        for (int64_t col = (p1 - p0) * uk.nr; col < ldc; ++col)
          ASSERT_TRUE(same_bits(c[size_t(r * ldc + col)], acc ? 0.25f : std::nanf("")));
    }
  }
  EXPECT_GT(checked, 0);
}
INSTANTIATE_TEST_SUITE_P(All, MoeW4a8UkernelTest, ::testing::ValuesIn(variant_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// fused_moe over W4A8 experts on each variant equals the reference row's bits (all tiles
// follow one contract), for T = 0 (nothing written), 1 and a ragged 37, 1 and 2 threads.
class MoeW4a8Test : public ::testing::TestWithParam<std::string> {};
TEST_P(MoeW4a8Test, FusedMoeEqualsReferenceRow) {
  const Variant& v = test_variant(GetParam());
  CPUKERN_SKIP_IF_UNSUPPORTED(v);
  std::mt19937 rng(5);
  const int64_t E = 4, topk = 2, H = 96, I = 64;
  std::vector<uint8_t> b13, s13, b2, s2;
  make_weights(E * 2 * I, H, 0, rng, b13, s13);
  make_weights(E * H, I, 1, rng, b2, s2);
  auto pk = [&](const std::string& isa, const std::vector<uint8_t>& b, const std::vector<uint8_t>& s,
                int64_t o, int64_t i) {
    return prepare_mxfp4(b.data(), s.data(), E, o, i, test_variant(isa), WeightFormat::kMxfp4A8);
  };
  auto w13 = pk(v.name, b13, s13, 2 * I, H), w2 = pk(v.name, b2, s2, H, I);
  auto r13 = pk("reference", b13, s13, 2 * I, H), r2 = pk("reference", b2, s2, H, I);
  EXPECT_STREQ(format_name(w13->format), "mxfp4_a8");
  EXPECT_EQ(parse_format("mxfp4_a8"), WeightFormat::kMxfp4A8);
  for (int64_t t : {0, 1, 37}) {
    auto x = rows_with_edges(t, H, rng);
    if (t > 7) x[size_t(7 * H + H / 2)] = f32_to_bf16(1.0f);  // no NaN row (NaN bits may differ)
    std::vector<float> wts(size_t(t * topk));
    std::vector<int32_t> ids(size_t(t * topk));
    for (int64_t s = 0; s < t * topk; ++s) {
      wts[size_t(s)] = 0.5f;
      ids[size_t(s)] = int32_t((s / topk + s % topk) % E);
    }
    std::vector<bf16_t> want(size_t(t * H), bf16_t(0x7fc1));
    fused_moe(x.data(), t, H, *r13, *r2, wts.data(), ids.data(), topk, Activation::kSwigluOai,
              nullptr, nullptr, false, 1, want.data());
    for (int threads : {1, 2}) {
      std::vector<bf16_t> got(size_t(t * H), bf16_t(0x7fc1));
      fused_moe(x.data(), t, H, *w13, *w2, wts.data(), ids.data(), topk, Activation::kSwigluOai,
                nullptr, nullptr, false, threads, got.data());
      EXPECT_EQ(got, want) << v.name << " t=" << t << " threads=" << threads;
    }
  }
}
INSTANTIATE_TEST_SUITE_P(All, MoeW4a8Test, ::testing::ValuesIn(variant_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(MoeW4a8, PrepackNamesTheArgument) {
  std::vector<uint8_t> b(2 * 16), s(2, 127);
  try {
    prepare_mxfp4(b.data(), s.data(), 1, 2, 32, "", WeightFormat::kInt8);
    ADD_FAILURE() << "format int8 accepted for MXFP4 blocks";
  } catch (const InvalidArgument& ex) {
    EXPECT_EQ(std::string(ex.what()).rfind("format: ", 0), 0u) << ex.what();
  }
  s[1] = 255;
  try {
    prepare_mxfp4(b.data(), s.data(), 1, 2, 32, "", WeightFormat::kMxfp4A8);
    ADD_FAILURE() << "scale 255 accepted";
  } catch (const InvalidArgument& ex) {
    EXPECT_EQ(std::string(ex.what()).rfind("scales: ", 0), 0u) << ex.what();
  }
  EXPECT_THROW(prepare_mxfp4(b.data(), s.data(), 1, 2, 48, "", WeightFormat::kMxfp4A8),
               InvalidArgument);
}

}  // namespace
}  // namespace cpukern::moe
