// The serialised form of a prepared widely-linear layer (widely_linear.h from_buffer /
// serialize): round trips on every variant this CPU runs and the SIMDe rows (zero-copy views,
// identical results fused and unfused, batch 1..5), re-preparing the public layout for another
// variant, a clear error for lookup layouts of another CPU, every header byte flipped (refused
// or harmless, tests/cc/prepared/tamper.h), sections moved, and a fuzz of header and payload
// bytes, including payloads of one byte value (0xFF sets both pattern bits of every column:
// the batched signed-table kernel's largest code offsets). Memory safety: the ASan leg.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/errors.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/common/ternary_codes.h"
#include "kernels/widely_linear/ukernel.h"
#include "tests/cc/prepared/tamper.h"
#include "tests/cc/widely_linear/list_rows.h"

namespace cpukern::widely_linear {
namespace {

struct Layer {
  int64_t stages, n, m, words;
  std::vector<uint32_t> planes;
  std::vector<float> scales;  // (stages, 4, n)
};

Layer random_layer(int64_t stages, int64_t n, int64_t m, std::mt19937& rng) {
  Layer L{stages, n, m, ternary_codes::words_for(m), {}, {}};
  L.planes.assign(size_t(stages * 4 * n * L.words), 0);
  for (int64_t p = 0; p < stages * 4 * n; ++p)
    for (int64_t c = 0; c < m; ++c)
      L.planes[size_t(p * L.words + c / 16)] |= uint32_t(rng() % 3) << (2 * (c % 16));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  L.scales.resize(size_t(stages * 4 * n));
  for (auto& s : L.scales) s = d(rng);
  return L;
}

std::shared_ptr<const PreparedLayer> prep(const Variant& v, const Layer& L) {
  return prepare_with(v, L.planes.data(), L.scales.data(), true, L.stages, L.n, L.words, L.m);
}

AlignedBuffer to_buffer(const PreparedLayer& l) {
  AlignedBuffer b{static_cast<size_t>(serialized_size(l))};
  serialize(l, b.data<unsigned char>(), int64_t(b.size()));
  return b;
}

std::shared_ptr<const PreparedLayer> import(const unsigned char* p, int64_t size, bool verify,
                                            const std::string& isa, bool allow_reprepare = true,
                                            bool with_simde = false) {
  const auto o = blob::import_options<ImportOptions>(verify, isa, "buffer", 0, allow_reprepare);
  return from_buffer(p, size, nullptr, o,  // with_simde: a SIMDe row's buffer is a view of it
                     blob::testing::import_registry(registry(), simde_variants(), with_simde));
}

std::vector<float> run_layer(const PreparedLayer& l, const std::vector<float>& x, int64_t batch,
                             bool fused) {
  std::vector<float> y(static_cast<size_t>(batch * 2 * l.n));
  run(l, x.data(), batch, fused, 1, y.data());
  return y;
}

std::vector<float> random_x(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<const Variant*> runnable_rows() {
  return blob::testing::runnable_rows(registry(), simde_variants());
}

TEST(WidelyLinearSerialize, RoundTripIsAZeroCopyViewWithIdenticalResults) {
  std::mt19937 rng(1);
  for (const Variant* v : runnable_rows())
    for (auto [stages, n, m] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {2, 37, 50}, {2, 130, 300}}) {
      SCOPED_TRACE(std::string(v->name) + " n=" + std::to_string(n) + " m=" + std::to_string(m));
      const Layer L = random_layer(stages, n, m, rng);
      auto l = prep(*v, L);
      const AlignedBuffer b = to_buffer(*l);
      auto view = import(b.data<unsigned char>(), int64_t(b.size()), true, v->name, false, true);
      ASSERT_EQ(view->layout(), b.data<unsigned char>() + 448);
      for (int64_t batch : {1, 2, 5}) {
        const auto x = random_x(batch * 2 * m, rng);
        EXPECT_EQ(run_layer(*l, x, batch, true), run_layer(*view, x, batch, true));
        EXPECT_EQ(run_layer(*l, x, batch, false), run_layer(*view, x, batch, false));
      }
    }
}

// Packing straight into the serialised form (prepare_with's into), on every row this CPU runs
// and every SIMDe row: into a buffer of garbage, serialize's bytes for the same layer prepared
// the usual way, viewed in place, with identical results (per-tensor and per-row scales).
TEST(WidelyLinearSerialize, PrepareIntoWritesTheSerialisedBytes) {
  std::mt19937 rng(7);
  for (const Variant* v : runnable_rows())
    for (auto [stages, n, m] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {2, 37, 50}, {1, 130, 300}})
      for (bool per_row : {true, false}) {
        SCOPED_TRACE(std::string(v->name) + " n=" + std::to_string(n) + " m=" + std::to_string(m));
        const Layer L = random_layer(stages, n, m, rng);
        auto l = prepare_with(*v, L.planes.data(), L.scales.data(), per_row, stages, n, L.words, m);
        const AlignedBuffer expected = to_buffer(*l);
        const BlobTarget t = blob::testing::garbage_target(int64_t(expected.size()));
        auto direct = prepare_with(*v, L.planes.data(), L.scales.data(), per_row, stages, n,
                                   L.words, m, &t);
        blob::testing::expect_blob(*direct, t, expected);
        const auto x = random_x(2 * 2 * m, rng);
        EXPECT_EQ(run_layer(*l, x, 2, true), run_layer(*direct, x, 2, true));
      }
}

// prepared_size is serialize's size for the registry's rows; prepare's into refuses a wrong
// size, a misaligned buffer and one over the planes, naming "out", before writing anything.
TEST(WidelyLinearSerialize, PrepareIntoSizesAndOutErrors) {
  std::mt19937 rng(8);
  const Layer L = random_layer(2, 45, 70, rng);
  for (const Variant& v : registry().variants()) {
    if (!v.supported()) continue;
    auto l = prepare(L.planes.data(), L.scales.data(), true, 2, 45, L.words, 70, v.name);
    EXPECT_EQ(prepared_size(2, 45, L.words, 70, v.name), serialized_size(*l)) << v.name;
    const BlobTarget t = blob::testing::garbage_target(serialized_size(*l));
    auto direct = prepare(L.planes.data(), L.scales.data(), true, 2, 45, L.words, 70, v.name, &t);
    blob::testing::expect_blob(*direct, t, to_buffer(*l));
  }
  const int64_t size = prepared_size(2, 45, L.words, 70, "");
  BlobTarget t = blob::testing::garbage_target(size + 64);
  for (const int64_t wrong : {size - 64, size + 64}) {
    t.size = wrong;
    blob::testing::expect_out_error(
        [&] { prepare(L.planes.data(), L.scales.data(), true, 2, 45, L.words, 70, "", &t); },
        std::to_string(size) + " bytes");
  }
  t.p += 8;
  t.size = size;
  blob::testing::expect_out_error(
      [&] { prepare(L.planes.data(), L.scales.data(), true, 2, 45, L.words, 70, "", &t); },
      "64-byte");
  BlobTarget over = blob::testing::garbage_target(size);
  EXPECT_THROW(prepared_size(2, 45, L.words + 1, 70, ""), InvalidArgument);
  const auto* in = reinterpret_cast<const float*>(over.p + size - 4 * 2 * 4 * 45);
  blob::testing::expect_out_error(
      [&] { prepare(L.planes.data(), in, true, 2, 45, L.words, 70, "", &over); }, "'scales'");
  EXPECT_EQ(over.p[0], 0xA5) << "nothing is written before the checks";
}

// The public layout (t2p16x4: the reference and the pext / NEON rows) is prepared again for
// another variant, bitwise what preparing the planes for it gives; a lookup layout made for a
// variant not asked for cannot be unpacked: a clear error.
TEST(WidelyLinearSerialize, OtherVariantLayouts) {
  std::mt19937 rng(2);
  const Layer L = random_layer(2, 45, 70, rng);
  const Variant& def = registry().default_variant();
  auto pub = prep(registry().find("reference"), L);
  const AlignedBuffer b = to_buffer(*pub);
  auto again = import(b.data<unsigned char>(), int64_t(b.size()), true, def.name);
  EXPECT_EQ(again->isa, def.name);
  auto direct = prep(def, L);
  const auto x = random_x(3 * 140, rng);
  EXPECT_EQ(run_layer(*direct, x, 3, true), run_layer(*again, x, 3, true));
  EXPECT_THROW(import(b.data<unsigned char>(), int64_t(b.size()), false, def.name, false),
               InvalidArgument);
  for (const Variant& v : simde_variants()) {  // an AVX-512 machine's buffers
    auto l = prep(v, L);
    const AlignedBuffer sb = to_buffer(*l);
    if (std::string(v.ukernel.layout->name) == "t2p16x4") {
      auto r = import(sb.data<unsigned char>(), int64_t(sb.size()), true, "");
      EXPECT_EQ(run_layer(*direct, x, 3, true), run_layer(*r, x, 3, true));
    } else {
      try {
        import(sb.data<unsigned char>(), int64_t(sb.size()), true, "");
        ADD_FAILURE() << v.name << ": a lookup layout of another CPU was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("cannot be unpacked"), std::string::npos) << e.what();
      }
    }
  }
}

// Every layout (each registry row this CPU runs and each SIMDe row: t2p16x4, g3r8x4,
// g4r16x4): every header byte flipped, bits 0 and 7, one at a time. With verify, each flip is
// refused or gives bitwise the clean result (fused and unfused); without, the O(1) checks
// refuse each flip that leaves the header inconsistent with itself (tamper.h; the variant is
// forced). Each section moved by 64 bytes, checksum re-stamped: refused either way.
TEST(WidelyLinearSerialize, EveryHeaderByteFlipIsRefusedOrHarmless) {
  std::mt19937 rng(4);
  for (const Variant* v : runnable_rows()) {
    const std::string what = v->name;
    const Layer L = random_layer(2, 9, 40, rng);
    auto l = prep(*v, L);
    const AlignedBuffer clean = to_buffer(*l);
    const int64_t batch = 2;
    const auto x = random_x(batch * 2 * L.m, rng);
    auto run_both = [&](const PreparedLayer& p) {
      if (p.n != L.n || p.m != L.m) {  // another valid shape (no verify): in bounds
        if (p.n * p.m <= (int64_t(1) << 20)) run_layer(p, random_x(2 * p.m, rng), 1, true);
        return std::vector<float>{};
      }
      std::vector<float> y = run_layer(p, x, batch, true), u = run_layer(p, x, batch, false);
      y.insert(y.end(), u.begin(), u.end());
      return y;
    };
    auto import_raw = [&](const unsigned char* p, int64_t n, bool verify) {
      return import(p, n, verify, verify ? "" : v->name, true, true);
    };
    blob::testing::check_tampering(clean, 3, run_both(*l), run_both, import_raw, what);
  }
}

TEST(WidelyLinearSerialize, FuzzedBuffersThrowOrComputeInBounds) {
  std::mt19937 rng(3);
  blob::testing::FuzzCounts counts;
  for (const Variant* v : runnable_rows()) {
    const Layer L = random_layer(2, 70, 100, rng);
    auto l = prep(*v, L);
    const AlignedBuffer clean = to_buffer(*l);
    const auto fill = [&](int t) { return t == 0 ? 0xFF : int(rng() % 256); };
    blob::testing::fuzz(clean, 120, 8, fill, rng, counts, [&](const AlignedBuffer& b, int) {
      auto got = import(b.data<unsigned char>(), int64_t(b.size()), false, v->name, true,
                        true);
      if (got->n * got->m > (int64_t(1) << 20)) return;  // a valid header, too large to run here
      for (int64_t batch : {1, 4}) {
        const auto x = random_x(batch * 2 * got->m, rng);
        run_layer(*got, x, batch, true);
        run_layer(*got, x, batch, false);
      }
    });
  }
  EXPECT_GT(counts.threw, 0);
  EXPECT_GT(counts.ran, 0);
}

}  // namespace
}  // namespace cpukern::widely_linear
