// MXFP4 ukernels against their variant's bf16 ukernel on the dequantized weights, bit for bit,
// at the edges of the decode GEMV's fast paths (accumulators scaled by the block scale,
// admitted for block scales in [95, 159] and activations 0 or 2**-L <= |a| <= 2**32, L = 64 on
// avx2 and 40 on avx512_bf16, whose vdpbf16ps flushes subnormals): scales
// just inside and outside that window, blocks that switch paths inside one call, activations
// at and past the bounds, subnormal, inf and NaN activations, rows of zeros, one bad row in a
// row block. Every variant runs it; each must give the bf16 kernel's bits whatever its paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/bf16.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernel.h"
#include "tests/cc/common/variant_params.h"
#include "tests/cc/moe/list_rows.h"

namespace cpukern::moe {
namespace {

std::vector<std::string> variant_names() {
  return cpukern::testing::test_variant_names(list_rows(), simde_variants());
}

// Activation rows of a kind: 0 normal, 1 values at the fast paths' bounds (2**-64, 2**-40,
// 2**32), 2 one value just past one (2**-65, 2**-41, 2**33), 3 subnormal / inf / NaN entries,
// 4 zeros, 5 all tiny (~2**-120: products underflow to subnormals unless scaled), 6 all huge
// (~2**110: products overflow unless scaled), 7 all just inside the avx512_bf16 window
// (~2**-39, with low block scales: the smallest values its fast path admits). 5 and 6 give
// other bits on a fast path that admitted them.
std::vector<bf16_t> rows_of(int kind, int64_t m, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<bf16_t> a(size_t(m * k));
  for (auto& x : a) {
    float v = nd(rng);
    if (kind == 1) {
      const float bound[] = {0x1p-64f, 0x1p-40f, 0x1p32f};
      v = bound[rng() % 3] * (rng() % 2 ? 1 : -1);
    }
    if (kind == 7) v = std::copysign(0x1p-39f * (1.0f + std::fabs(v) / 8), v);
    if (kind == 5) v *= 0x1p-120f;
    if (kind == 6) v *= 0x1p110f;
    x = f32_to_bf16(v);
  }
  if (kind == 2) {
    const float past[] = {0x1p-65f, 0x1p-41f, 0x1p33f};
    a[size_t(rng() % a.size())] = f32_to_bf16(past[rng() % 3]);
  }
  if (kind == 3) {
    const uint16_t odd[] = {0x0001, 0x8003, 0x7f80, 0xff80, 0x7fc0};
    a[size_t(rng() % a.size())] = odd[rng() % 5];
  }
  if (kind == 4) std::fill(a.begin(), a.end(), bf16_t(0));
  return a;
}

class Mxfp4GemvEdges : public ::testing::TestWithParam<std::string> {};

TEST_P(Mxfp4GemvEdges, EqualBf16OfDequantizedBitwise) {
  const Variant& v =
      *cpukern::testing::find_test_variant(list_rows(), simde_variants(), GetParam());
  CPUKERN_SKIP_IF_UNSUPPORTED(v);
  const Ukernel& bk = ukernel_for(v, WeightFormat::kBf16);
  const Ukernel& mk = ukernel_for(v, WeightFormat::kMxfp4);
  std::mt19937 rng(5);
  const uint8_t edge[] = {94, 95, 96, 127, 158, 159, 160};
  for (int64_t o : {16, 45, 80})
  for (int64_t k : {32, 64, 544, 2880})
  for (int kind = 0; kind < 8; ++kind)
  for (int64_t m : {1, 2, 3, 5, 6}) {
    const int64_t nb = k / 32;
    std::vector<uint8_t> blocks(size_t(o * nb * 16)), scales(size_t(o * nb));
    for (auto& b : blocks) b = uint8_t(rng());
    // Per block index: all columns inside the window, or one column at an edge value.
    for (int64_t b = 0; b < nb; ++b) {
      const bool at_edge = rng() % 3 == 0;
      // in the window; low for tiny activations, high for huge ones (kinds 5, 6)
      const int lo = kind == 5 || kind == 7 ? 96 : kind == 6 ? 150 : 100, span = kind >= 5 ? 9 : 50;
      for (int64_t r = 0; r < o; ++r)
        scales[size_t(r * nb + b)] = uint8_t(lo + rng() % span);
      if (at_edge) scales[size_t((rng() % o) * nb + b)] = edge[rng() % 7];
    }
    std::vector<bf16_t> deq(size_t(o * k));
    mxfp4::dequantize(blocks.data(), scales.data(), o, k, deq.data());
    auto a = rows_of(kind, m, k, rng);
    if (kind == 0 && m > 1) a[size_t(k + rng() % k)] = f32_to_bf16(0x1p40f);  // row 1 only
    std::vector<char> wb(size_t(bk.packed_size(o, k))), wm(size_t(mk.packed_size(o, k)));
    bk.pack({deq.data()}, o, k, wb.data());
    mk.pack({blocks.data(), scales.data()}, o, k, wm.data());
    std::vector<char> ap(size_t(bk.packed_a_size(m, k)) + 64);
    bk.pack_a(a.data(), k, nullptr, m, k, ap.data());
    const int64_t p1 = (o + bk.nr - 1) / bk.nr, ldc = p1 * bk.nr + 1;
    for (bool acc : {false, true}) {
      std::vector<float> c1(size_t(m * ldc), 0.25f), c2 = c1;
      bk.gemm(ap.data(), m, k, wb.data(), 0, p1, c1.data(), ldc, acc);
      mk.gemm(ap.data(), m, k, wm.data(), 0, p1, c2.data(), ldc, acc);
      // Bitwise, zero signs included (every decode gives code 8 as -0, as dequantize does),
      // except the sign of a NaN: a NaN activation times a negative weight keeps or flips its
      // sign depending on whether the compiler negates the product or the weight (IEEE leaves
      // a NaN's sign unspecified).
      for (size_t q = 0; q < c1.size(); ++q)
        if (std::isnan(c1[q]) && std::isnan(c2[q])) c2[q] = c1[q];
      ASSERT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * 4))
          << "o=" << o << " k=" << k << " m=" << m << " rows kind " << kind
          << " accumulate=" << acc;
    }
  }
}
// Every code under every scale byte 0..254 (255, NaN, is refused at packing): the 280
// (column, block) pairs of the layer hold the scales 0..254 (each at least once), and each
// block's 32 codes hold all 16 twice (once at an even k, once at an odd k), so the values span
// the subnormal results (s = 0, 1: 2**-128 ..), the normal range and the +-inf of 6 * 2**127
// (s = 254, codes 7 and 15). Each row count from the decode GEMV (1..8) to
// prefill (9, 16) equals the bf16 kernel on the dequantized weights bit for bit.
TEST_P(Mxfp4GemvEdges, EveryCodeEveryScaleEqualsBf16Bitwise) {
  const Variant& v = *cpukern::testing::find_test_variant(list_rows(), simde_variants(), GetParam());
  CPUKERN_SKIP_IF_UNSUPPORTED(v);
  const Ukernel& bk = ukernel_for(v, WeightFormat::kBf16);
  const Ukernel& mk = ukernel_for(v, WeightFormat::kMxfp4);
  std::mt19937 rng(9);
  // All scales, then only the fast window's [95, 159] (each block on the fast path where the
  // activations are inside its window too: kinds 0 and 7).
  for (bool window : {false, true}) {
    const int64_t o = 40, k = 7 * 32, nb = k / 32;  // 280 (column, block) pairs
    std::vector<uint8_t> blocks(size_t(o * nb * 16)), scales(size_t(o * nb));
    for (int64_t r = 0; r < o; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t n = r * nb + b;
        const int64_t in_window = mxfp4::kFastScaleMin + n % (mxfp4::kFastScaleSpan + 1);
        scales[size_t(n)] = uint8_t(window ? in_window : n % 255);
        for (int j = 0; j < 16; ++j) {  // codes (j + n) % 16 (even k) and that + 8 (odd k)
          const int c = int((j + n) % 16);
          blocks[size_t(n * 16 + j)] = uint8_t(c | ((c + 8) % 16) << 4);
        }
      }
    ASSERT_EQ(-1, mxfp4::first_nan_scale(scales.data(), int64_t(scales.size())));
    std::vector<bf16_t> deq(size_t(o * k));
    mxfp4::dequantize(blocks.data(), scales.data(), o, k, deq.data());
    for (int64_t q = 0; q < int64_t(deq.size()); ++q) {  // dequantize = value, bit for bit
      const float x = mxfp4::value(mxfp4::code_at(blocks.data() + (q / 32) * 16, int(q % 32)),
                                   scales[size_t(q / 32)]);
      ASSERT_EQ(f32_to_bf16(x), deq[size_t(q)]) << q;
    }
    std::vector<char> wb(size_t(bk.packed_size(o, k))), wm(size_t(mk.packed_size(o, k)));
    bk.pack({deq.data()}, o, k, wb.data());
    mk.pack({blocks.data(), scales.data()}, o, k, wm.data());
    for (int kind : {0, 5, 6, 7})
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16}) {
      auto a = rows_of(kind, m, k, rng);
      std::vector<char> ap(size_t(bk.packed_a_size(m, k)) + 64);
      bk.pack_a(a.data(), k, nullptr, m, k, ap.data());
      const int64_t p1 = (o + bk.nr - 1) / bk.nr, ldc = p1 * bk.nr;
      for (bool acc : {false, true}) {
        std::vector<float> c1(size_t(m * ldc), -0.5f), c2 = c1;
        bk.gemm(ap.data(), m, k, wb.data(), 0, p1, c1.data(), ldc, acc);
        mk.gemm(ap.data(), m, k, wm.data(), 0, p1, c2.data(), ldc, acc);
        for (size_t q = 0; q < c1.size(); ++q)  // a NaN's sign is unspecified (as above)
          if (std::isnan(c1[q]) && std::isnan(c2[q])) c2[q] = c1[q];
        ASSERT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * 4))
            << "m=" << m << " rows kind " << kind << " accumulate=" << acc
            << " window=" << window;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, Mxfp4GemvEdges, ::testing::ValuesIn(variant_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace cpukern::moe
