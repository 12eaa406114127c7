// AMX: the emulated tile intrinsics (kernels/common/amx_emulation.h) against plain references
// (exact integer sums, float64 bounds, the SDM's denormal rules and its even/odd pair order),
// and, on a CPU with AMX, the native tile GEMMs of the amx row against the same sources built
// over the emulation (the simde_amx row), bit for bit. Elsewhere the native test skips and
// prints why.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/amx_emulation.h"
#include "kernels/common/bf16.h"
#include "kernels/common/cpu_features.h"
#include "kernels/common/isa.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernel.h"
#include "tests/cc/moe/list_rows.h"

namespace cpukern::moe {
namespace {

// Palette 1: tile t gets rows[t] rows of colsb[t] bytes.
void configure(const std::vector<int>& rows, const std::vector<int>& colsb) {
  alignas(64) uint8_t cfg[64] = {1};
  for (size_t t = 0; t < rows.size(); ++t) {
    cfg[16 + 2 * t] = uint8_t(colsb[t]);
    cfg[48 + t] = uint8_t(rows[t]);
  }
  _tile_loadconfig(cfg);
}

float f32_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// n bf16 values uniform in [-2, 2).
std::vector<bf16_t> random_bf16(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<bf16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

// C (16 x 16 fp32) = c0 + A (16 x 2nk bf16) . B (nk rows of 16 bf16 pairs) through the
// emulated TDPBF16PS.
std::vector<float> dpbf16ps(const std::vector<bf16_t>& a, const std::vector<bf16_t>& b, int nk,
                            const std::vector<float>& c0) {
  configure({16, 16, nk}, {64, 4 * nk, 64});
  std::vector<float> c = c0;
  _tile_loadd(0, c.data(), 64);
  _tile_loadd(1, a.data(), 4 * nk);
  _tile_loadd(2, b.data(), 64);
  _tile_dpbf16ps(0, 1, 2);
  _tile_stored(0, c.data(), 64);
  _tile_release();
  return c;
}

TEST(AmxEmulation, LoadStoreZeroAndConfig) {
  configure({3, 16}, {12, 64});
  alignas(64) uint8_t cfg[64];
  _tile_storeconfig(cfg);
  EXPECT_EQ(cfg[0], 1);
  EXPECT_EQ(cfg[16], 12);
  EXPECT_EQ(cfg[48], 3);
  EXPECT_EQ(cfg[18], 64);
  EXPECT_EQ(cfg[49], 16);
  std::vector<uint8_t> src(3 * 100), dst(3 * 50, 0xAA);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + 1);
  _tile_loadd(0, src.data(), 100);
  _tile_stored(0, dst.data(), 50);
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 50; ++j)
      EXPECT_EQ(dst[r * 50 + j], j < 12 ? src[r * 100 + j] : 0xAA) << r << " " << j;
  _tile_zero(0);
  _tile_stored(0, dst.data(), 50);
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 12; ++j) EXPECT_EQ(dst[r * 50 + j], 0);
  _tile_release();
  _tile_storeconfig(cfg);
  EXPECT_EQ(cfg[0], 0) << "TILERELEASE returns to the INIT state";
}

// Small integers: every product and partial sum is exact, so C is the exact sum.
TEST(AmxEmulation, Dpbf16psIsExactOnSmallIntegers) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> d(-8, 8);
  for (int nk : {1, 5, 16}) {
    std::vector<bf16_t> a(16 * 2 * nk), b(nk * 32);
    for (auto& x : a) x = f32_to_bf16(float(d(rng)));
    for (auto& x : b) x = f32_to_bf16(float(d(rng)));
    std::vector<float> c0(256);
    for (auto& x : c0) x = float(d(rng));
    const auto c = dpbf16ps(a, b, nk, c0);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        double s = c0[m * 16 + n];
        for (int k = 0; k < 2 * nk; ++k)
          s += double(bf16_to_f32(a[m * 2 * nk + k])) * bf16_to_f32(b[(k / 2) * 32 + 2 * n + k % 2]);
        ASSERT_EQ(c[m * 16 + n], float(s)) << "nk=" << nk << " m=" << m << " n=" << n;
      }
  }
}

// Random normal values: within the bound of one fp32 rounding per step (16 FMA steps per
// half-sum, the halves' sum and the add into C) of the float64 value.
TEST(AmxEmulation, Dpbf16psWithinFloat64Bound) {
  std::mt19937 rng(2);
  const auto a = random_bf16(16 * 32, rng), b = random_bf16(16 * 32, rng);
  std::vector<float> c0(256);
  for (auto& x : c0) x = bf16_to_f32(random_bf16(1, rng)[0]);
  const auto c = dpbf16ps(a, b, 16, c0);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      double s = c0[m * 16 + n], mag = std::fabs(c0[m * 16 + n]);
      for (int k = 0; k < 32; ++k) {
        const double p = double(bf16_to_f32(a[m * 32 + k])) * bf16_to_f32(b[(k / 2) * 32 + 2 * n + k % 2]);
        s += p;
        mag += std::fabs(p);
      }
      EXPECT_LE(std::fabs(c[m * 16 + n] - s), 18 * 0x1p-24 * mag) << m << " " << n;
    }
}

// The SDM's order: the even elements' products summed apart from the odd ones', then the two
// sums added, then C. Here the even sum 2**24 + 1 rounds to 2**24 and cancels the odd sum:
// 0, where adding the four products in k order would give 1.
TEST(AmxEmulation, Dpbf16psSumsEvenAndOddProductsApart) {
  std::vector<bf16_t> a(16 * 4, 0), b(2 * 32, 0);
  for (int m = 0; m < 16; ++m) {
    a[m * 4 + 0] = f32_to_bf16(0x1p24f);   // k pair 0: even
    a[m * 4 + 1] = f32_to_bf16(-0x1p24f);  // k pair 0: odd
    a[m * 4 + 2] = f32_to_bf16(1.0f);      // k pair 1: even
  }
  for (int n = 0; n < 16; ++n) {
    b[0 * 32 + 2 * n] = b[0 * 32 + 2 * n + 1] = f32_to_bf16(1.0f);
    b[1 * 32 + 2 * n] = f32_to_bf16(1.0f);
  }
  const auto c = dpbf16ps(a, b, 2, std::vector<float>(256, 0.0f));
  for (float v : c) ASSERT_EQ(v, 0.0f);
}

// Denormal bf16 inputs count as zero; denormal results (and a denormal C) become zero.
TEST(AmxEmulation, Dpbf16psDenormalsAreZeroAndFlushed) {
  std::mt19937 rng(3);
  auto a = random_bf16(16 * 32, rng), b = random_bf16(16 * 32, rng);
  std::vector<bf16_t> a0 = a, b0 = b;
  for (int i = 0; i < 512; i += 7) {
    const bf16_t denormal = bf16_t((1 + i % 0x7f) | (i & 8 ? 0x8000 : 0));
    a[i] = denormal;
    a0[i] = 0;
    b[(i * 3) % 512] = denormal;
    b0[(i * 3) % 512] = 0;
  }
  std::vector<float> c0(256, 0.5f);
  const auto c = dpbf16ps(a, b, 16, c0), want = dpbf16ps(a0, b0, 16, c0);
  EXPECT_EQ(0, std::memcmp(c.data(), want.data(), c.size() * 4));
  // 2**-70 * 2**-70 = 2**-140 is an fp32 denormal: flushed; so is a denormal C.
  std::vector<bf16_t> t(16 * 2, 0), u(32, 0);
  for (int m = 0; m < 16; ++m) t[m * 2] = f32_to_bf16(0x1p-70f);
  for (int n = 0; n < 16; ++n) u[2 * n] = f32_to_bf16(n % 2 ? -0x1p-70f : 0x1p-70f);
  const auto tiny = dpbf16ps(t, u, 1, std::vector<float>(256, f32_of(0x00000100)));
  for (float v : tiny) ASSERT_EQ(bits_of(v) & 0x7fffffff, 0u) << v;
}

// int8 quads: exact int32 sums, signed or unsigned per operand, wrapping modulo 2**32.
TEST(AmxEmulation, Int8DotProductsAreExactAndWrap) {
  std::mt19937 rng(4);
  std::vector<uint8_t> a(16 * 64), b(16 * 64);
  for (auto& x : a) x = uint8_t(rng());
  for (auto& x : b) x = uint8_t(rng());
  std::vector<int32_t> c0(256);
  for (auto& x : c0) x = int32_t(rng());
  c0[0] = INT32_MAX;
  for (int kind = 0; kind < 4; ++kind) {
    const bool sa = kind < 2, sb = kind % 2 == 0;
    configure({16, 16, 16}, {64, 64, 64});
    std::vector<int32_t> c = c0;
    _tile_loadd(0, c.data(), 64);
    _tile_loadd(1, a.data(), 64);
    _tile_loadd(2, b.data(), 64);
    if (kind == 0) _tile_dpbssd(0, 1, 2);
    if (kind == 1) _tile_dpbsud(0, 1, 2);
    if (kind == 2) _tile_dpbusd(0, 1, 2);
    if (kind == 3) _tile_dpbuud(0, 1, 2);
    _tile_stored(0, c.data(), 64);
    _tile_release();
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        int64_t s = c0[m * 16 + n];
        for (int k = 0; k < 64; ++k) {
          const int64_t x = sa ? int8_t(a[m * 64 + k]) : a[m * 64 + k];
          const int64_t y = sb ? int8_t(b[(k / 4) * 64 + 4 * n + k % 4]) : b[(k / 4) * 64 + 4 * n + k % 4];
          s += x * y;
        }
        ASSERT_EQ(uint32_t(c[m * 16 + n]), uint32_t(uint64_t(s))) << kind << " " << m << " " << n;
      }
  }
}

const Variant* row(const std::vector<Variant>& rows, const std::string& name) {
  for (const auto& v : rows)
    if (name == v.name) return &v;
  return nullptr;
}

// The native tile GEMMs equal the emulated ones bit for bit (bf16, MXFP4 and int8 weights,
// every tile height and a partial one, K tails, accumulate), with denormal activations and
// weights.
TEST(AmxNative, TilesEqualTheEmulationBitwise) {
  if (!cpu_has(isa::amx))
    GTEST_SKIP() << "no native AMX here (" << why_missing(isa::amx & ~cpu_info().features)
                 << "): the native tiles are checked against the emulation on AMX hosts only";
  const Variant* native = row(list_rows(), "amx");
  const Variant* emulated = row(simde_variants(), "simde_amx");
  ASSERT_TRUE(native && emulated);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (WeightFormat f : {WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8}) {
    const Ukernel& nk = *ukernel_for(*native, f).tiles;
    const Ukernel& ek = *ukernel_for(*emulated, f).tiles;
    for (int64_t k : {32, 45, 301, 640}) {
      if (f == WeightFormat::kMxfp4 && k % 32) continue;
      const int64_t o = 70;
      std::vector<bf16_t> w(size_t(o * k));
      for (size_t i = 0; i < w.size(); ++i) w[i] = i % 53 ? f32_to_bf16(d(rng)) : bf16_t(0x0003);
      std::vector<uint8_t> blocks(size_t(o * k / 2)), scales(size_t(o * k / 32));
      for (auto& x : blocks) x = uint8_t(rng());
      for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(i % 9 ? 120 + i % 10 : 1);
      std::vector<char> wn(size_t(nk.packed_size(o, k))), we(size_t(ek.packed_size(o, k)));
      std::vector<int8_t> q(size_t(o * k));
      std::vector<float> qs(static_cast<size_t>(o));
      for (auto& x : q) x = int8_t(int(rng() % 255) - 127);
      for (auto& x : qs) x = d(rng) + 1.5f;
      const ExpertWeights src = f == WeightFormat::kInt8    ? ExpertWeights{q.data(), qs.data()}
                                : f == WeightFormat::kMxfp4 ? ExpertWeights{blocks.data(), scales.data()}
                                                            : ExpertWeights{w.data()};
      nk.pack(src, o, k, wn.data());
      ek.pack(src, o, k, we.data());
      for (int64_t m : {1, 7, 16, 17, 32, 45, 70}) {
        std::vector<bf16_t> a(size_t(m * k));
        for (size_t i = 0; i < a.size(); ++i) a[i] = i % 41 ? f32_to_bf16(d(rng)) : bf16_t(0x8005);
        std::vector<char> an(size_t(nk.packed_a_size(m, k))), ae(size_t(ek.packed_a_size(m, k)));
        nk.pack_a(a.data(), k, nullptr, m, k, an.data());
        ek.pack_a(a.data(), k, nullptr, m, k, ae.data());
        const int64_t p1 = (o + nk.nr - 1) / nk.nr, ldc = p1 * nk.nr + 5;
        for (bool acc : {false, true}) {
          std::vector<float> cn(size_t(m * ldc), 0.25f), ce = cn;
          nk.gemm(an.data(), m, k, wn.data(), 0, p1, cn.data(), ldc, acc);
          ek.gemm(ae.data(), m, k, we.data(), 0, p1, ce.data(), ldc, acc);
          ASSERT_EQ(0, std::memcmp(cn.data(), ce.data(), cn.size() * 4))
              << format_name(f) << " k=" << k << " m=" << m << " accumulate=" << acc;
        }
      }
    }
  }
}

}  // namespace
}  // namespace cpukern::moe
