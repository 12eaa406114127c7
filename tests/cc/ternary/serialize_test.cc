// The serialised form of prepared ternary weights (ternary.h from_buffer / serialize): round
// trips on every variant this CPU runs and on the SIMDe rows, zero-copy views, re-preparing a
// layout made for another CPU (the SIMDe AVX-512 rows, a NEON lut4r16 buffer), every header
// byte flipped (refused or harmless, tests/cc/prepared/tamper.h), sections moved, and a fuzz
// over header and payload bytes: every corrupted buffer either throws InvalidArgument or
// computes in bounds (the ASan leg runs this test).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/errors.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/ternary/ternary.h"
#include "kernels/ternary/ukernel.h"
#include "kernels/ternary/ukernels/layouts.h"
#include "tests/cc/prepared/tamper.h"
#include "tests/cc/ternary/list_rows.h"

namespace cpukern::ternary {
namespace {

struct Case {
  int64_t m, k, g;
};

std::vector<uint32_t> random_words(int64_t m, int64_t k, std::mt19937& rng) {
  std::vector<int8_t> w(size_t(m * k));
  for (auto& v : w) v = int8_t(int(rng() % 3) - 1);
  std::vector<uint32_t> p(size_t(m * words_for(k)));
  if (m * k != 0) pack(w.data(), m, k, p.data());
  return p;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

AlignedBuffer to_buffer(const PreparedWeights& w, bool int8) {
  AlignedBuffer b(size_t(serialized_size(w, int8)));
  serialize(w, int8, 1, b.data<unsigned char>(), int64_t(b.size()));
  return b;
}

std::vector<float> run(const PreparedWeights& w, const std::vector<float>& x, int64_t batch,
                       Act act) {
  std::vector<float> y(size_t(batch * w.m) + 1);
  gemv(w, x.data(), batch, nullptr, 0, act, 1, y.data());
  y.pop_back();
  return y;
}

std::shared_ptr<const PreparedWeights> import(const AlignedBuffer& b, ImportOptions o = {}) {
  return from_buffer(b.data<unsigned char>(), int64_t(b.size()), nullptr, o);
}

// An import that finds the SIMDe rows too (a buffer one of them wrote is a view of it).
std::shared_ptr<const PreparedWeights> import_with_simde(const unsigned char* p, int64_t size,
                                                         const ImportOptions& o) {
  return from_buffer(p, size, nullptr, o, blob::testing::with_simde_rows(registry(), simde_variants()));
}

const std::vector<Case> kCases = {{0, 5, 0},   {3, 0, 0},    {1, 1, 0},   {17, 33, 0},
                                  {40, 301, 0}, {130, 700, 0}, {19, 257, 64}, {140, 530, 256}};

// Every variant this CPU runs and every SIMDe row: export, import (a view), identical results.
TEST(TernarySerialize, RoundTripIsAZeroCopyViewWithIdenticalResults) {
  std::mt19937 rng(1);
  const auto rows = blob::testing::runnable_rows(registry(), simde_variants());
  for (const Variant* v : rows)
    for (const Case& c : kCases) {
      SCOPED_TRACE(std::string(v->name) + " m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) +
                   " g=" + std::to_string(c.g));
      const auto words = random_words(c.m, c.k, rng);
      const auto scale = random_floats(c.g ? c.m * groups_for(c.k, c.g) : c.m, rng);
      auto w = prepare_variant(*v, words.data(), c.m, c.k, scale.data(), 1, c.g);
      for (bool int8 : {false, true}) {
        const AlignedBuffer b = to_buffer(*w, int8);
        ImportOptions o;
        o.verify = true;
        o.isa = v->name;
        auto view = import_with_simde(b.data<unsigned char>(), int64_t(b.size()), o);
        ASSERT_TRUE(view->is_view()) << "not a view of the buffer";
        if (view->layout_bytes() > 0) {
          EXPECT_EQ(view->layout(), b.data<unsigned char>() + 448);
        }
        EXPECT_EQ(view->i8_ready(), int8 || c.m * c.k == 0 ||
                                        std::strcmp(v->ukernel.f32.layout, v->ukernel.i8.layout) == 0);
        const int64_t batch = 3;
        const auto x = random_floats(batch * c.k, rng);
        EXPECT_EQ(run(*w, x, batch, Act::kF32), run(*view, x, batch, Act::kF32));
        EXPECT_EQ(run(*w, x, batch, Act::kInt8), run(*view, x, batch, Act::kInt8));
      }
    }
}

// Packing straight into the serialised form (prepare_variant's into), on every row this CPU
// runs and every SIMDe row: into a buffer of garbage, the bytes serialize writes for the same
// weights prepared the usual way (checksum included; the int8 layout when asked), viewed in
// place, computing bitwise the same results. Empty, one-weight, ragged and grouped shapes.
TEST(TernarySerialize, PrepareIntoWritesTheSerialisedBytes) {
  std::mt19937 rng(11);
  std::vector<Case> cases = kCases;
  cases.insert(cases.end(), {{1, 17, 16}, {0, 40, 32}, {6, 0, 16}});
  for (const Variant* v : blob::testing::runnable_rows(registry(), simde_variants()))
    for (const Case& c : cases)
      for (bool int8 : {false, true}) {
        SCOPED_TRACE(std::string(v->name) + " m=" + std::to_string(c.m) + " k=" +
                     std::to_string(c.k) + " g=" + std::to_string(c.g) + (int8 ? " int8" : ""));
        const auto words = random_words(c.m, c.k, rng);
        const auto scale = random_floats(c.g ? c.m * groups_for(c.k, c.g) : c.m, rng);
        auto w = prepare_variant(*v, words.data(), c.m, c.k, scale.data(), 1, c.g);
        const AlignedBuffer expected = to_buffer(*w, int8);
        const BlobTarget t = blob::testing::garbage_target(int64_t(expected.size()));
        auto direct = prepare_variant(*v, words.data(), c.m, c.k, scale.data(), 2, c.g, &t, int8);
        blob::testing::expect_blob(*direct, t, expected);
        if (int8 && c.m * c.k > 0 && std::strcmp(v->ukernel.f32.layout, v->ukernel.i8.layout) != 0) {
          EXPECT_NE(direct->section(PreparedWeights::kI8Layout), nullptr) << "int8 layout not packed";
        }
        const auto x = random_floats(3 * c.k, rng);
        EXPECT_EQ(run(*w, x, 3, Act::kF32), run(*direct, x, 3, Act::kF32));
        EXPECT_EQ(run(*w, x, 3, Act::kInt8), run(*direct, x, 3, Act::kInt8));
      }
}

// The public entry points: prepared_size is the size of cpukern's to_bytes of prepare's
// weights (the int8 layout when asked or ready without packing), prepare_into writes those
// bytes; a wrong size, a misaligned buffer and one over the inputs are refused naming "out"
// before anything is written.
TEST(TernarySerialize, PrepareIntoMatchesToBytesAndChecksOut) {
  std::mt19937 rng(12);
  for (const Variant& v : registry().variants()) {
    if (!v.supported()) continue;
    for (const Case& c : {Case{0, 5, 0}, Case{3, 0, 0}, Case{1, 1, 0}, Case{40, 301, 0},
                          Case{19, 257, 64}})
      for (bool int8 : {false, true}) {
        SCOPED_TRACE(std::string(v.name) + " m=" + std::to_string(c.m) + " k=" +
                     std::to_string(c.k) + (int8 ? " int8" : ""));
        const auto words = random_words(c.m, c.k, rng);
        const auto scale = random_floats(c.g ? c.m * groups_for(c.k, c.g) : c.m, rng);
        const int64_t nw = words_for(c.k);
        auto w = prepare(words.data(), c.m, nw, c.k, scale.data(), v.name, 1, c.g);
        const AlignedBuffer expected = to_buffer(*w, int8 || w->i8_ready());
        EXPECT_EQ(prepared_size(c.m, nw, c.k, true, v.name, c.g, int8), int64_t(expected.size()));
        const BlobTarget t = blob::testing::garbage_target(int64_t(expected.size()));
        auto direct = prepare_into(words.data(), c.m, nw, c.k, scale.data(), v.name, 0, c.g, int8, t);
        blob::testing::expect_blob(*direct, t, expected);
      }
  }
  const int64_t m = 33, k = 100, nw = words_for(k);
  const auto words = random_words(m, k, rng);
  const int64_t n = prepared_size(m, nw, k, false, "", 0, false);
  BlobTarget t = blob::testing::garbage_target(n + 64);
  for (const int64_t wrong : {n - 64, n + 64}) {
    t.size = wrong;
    blob::testing::expect_out_error(
        [&] { prepare_into(words.data(), m, nw, k, nullptr, "", 0, 0, false, t); },
        std::to_string(n) + " bytes");
  }
  t.p += 16;
  t.size = n;
  blob::testing::expect_out_error(
      [&] { prepare_into(words.data(), m, nw, k, nullptr, "", 0, 0, false, t); }, "64-byte");
  // out over the packed words (the words copied into the buffer itself).
  BlobTarget over = blob::testing::garbage_target(n);
  std::memcpy(over.p + n - words.size() * 4, words.data(), words.size() * 4);
  const auto* in = reinterpret_cast<const uint32_t*>(over.p + n - words.size() * 4);
  blob::testing::expect_out_error(
      [&] { prepare_into(in, m, nw, k, nullptr, "", 0, 0, false, over); }, "'packed'");
  EXPECT_EQ(over.p[0], 0xA5) << "nothing is written before the checks";
  // Invalid words: prepare's error, naming "packed".
  auto bad = words;
  bad[5] = 0xFFFFFFFFu;
  try {
    prepare_into(bad.data(), m, nw, k, nullptr, "", 0, 0, false, blob::testing::garbage_target(n));
    ADD_FAILURE() << "invalid codes accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("packed: ", 0), 0u) << e.what();
  }
}

// Serialisation racing the first int8 call (which packs the int8 layout) on the same weights:
// each export is one consistent snapshot (its size taken once, with or without the int8
// layout), imports, and computes what the weights compute. ThreadSanitizer runs this too.
TEST(TernarySerialize, SerialisationRacingFirstInt8UseIsConsistent) {
  std::mt19937 rng(7);
  const int64_t m = 67, k = 530, batch = 2;
  const auto words = random_words(m, k, rng);
  const auto x = random_floats(batch * k, rng);
  for (const Variant* v : blob::testing::runnable_rows(registry(), simde_variants())) {
    SCOPED_TRACE(v->name);
    auto w = prepare_variant(*v, words.data(), m, k, nullptr, 1, 0);
    std::vector<float> first;
    std::thread gemv_thread([&] { first = run(*w, x, batch, Act::kInt8); });
    std::vector<AlignedBuffer> exports;
    for (int i = 0; i < 8; ++i) {
      const bool with_int8 = (i % 2) == 1 || w->i8_ready();
      exports.push_back(to_buffer(*w, with_int8));
    }
    gemv_thread.join();
    for (const AlignedBuffer& b : exports) {
      ImportOptions o;
      o.verify = true;
      o.isa = v->name;
      auto view = import_with_simde(b.data<unsigned char>(), int64_t(b.size()), o);
      EXPECT_EQ(first, run(*view, x, batch, Act::kInt8));
      EXPECT_EQ(run(*w, x, batch, Act::kF32), run(*view, x, batch, Act::kF32));
    }
  }
}

// A layout this CPU's registry cannot run (the SIMDe AVX-512 rows stand for an AVX-512
// machine's buffer) is unpacked and prepared again: bitwise what preparing the same weights
// for the default variant gives.
TEST(TernarySerialize, OtherCpuLayoutIsPreparedAgain) {
  std::mt19937 rng(2);
  for (const Variant& v : simde_variants())
    for (const Case& c : kCases) {
      SCOPED_TRACE(std::string(v.name) + " m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) +
                   " g=" + std::to_string(c.g));
      const auto words = random_words(c.m, c.k, rng);
      const auto scale = random_floats(c.g ? c.m * groups_for(c.k, c.g) : c.m, rng);
      auto w = prepare_variant(v, words.data(), c.m, c.k, scale.data(), 1, c.g);
      const AlignedBuffer b = to_buffer(*w, false);
      ImportOptions o;
      auto again = import(b, o);
      EXPECT_FALSE(again->is_view()) << "not prepared again";
      EXPECT_EQ(again->isa, registry().default_variant().name);
      auto direct = prepare(words.data(), c.m, words_for(c.k), c.k, scale.data(), "", 1, c.g);
      const auto x = random_floats(2 * c.k, rng);
      EXPECT_EQ(run(*direct, x, 2, Act::kF32), run(*again, x, 2, Act::kF32));
      o.allow_reprepare = false;  // the per-call path never prepares
      EXPECT_THROW(import(b, o), InvalidArgument);
    }
}

// A NEON (lut4r16) buffer, written by hand with the portable packer, imports on any CPU.
TEST(TernarySerialize, NeonLayoutImportsAnywhere) {
  std::mt19937 rng(3);
  const int64_t m = 37, k = 101;
  const auto words = random_words(m, k, rng);
  const auto scale = random_floats(m, rng);
  const int64_t bytes = layouts::lut4r16_size(m, k);
  const int64_t sizes[3] = {bytes, 4 * m, 0};
  const blob::LayoutPlan plan = blob::plan(sizes, 3);
  AlignedBuffer b(size_t(plan.total));
  auto* p = b.data<unsigned char>();
  packer_for("lut4r16").pack(words.data(), m, k, p + plan.section[0].offset);
  std::memcpy(p + plan.section[1].offset, scale.data(), size_t(4 * m));
  const int64_t dims[4] = {m, k, 0, 1};
  blob::finish(blob::make_header("ternary", "neon", "ternary_gemv_f32_f32_lut4r16_16x1__neon", "lut4r16",
                                 "", dims, 4, plan),
               p);
  ImportOptions o;
  o.verify = true;
  auto w = import(b, o);
  auto direct = prepare(words.data(), m, words_for(k), k, scale.data(), "", 1);
  const auto x = random_floats(k, rng);
  EXPECT_EQ(run(*direct, x, 1, Act::kF32), run(*w, x, 1, Act::kF32));
}

TEST(TernarySerialize, LayoutSizeTableMatchesEveryMicroKernel) {
  std::vector<const Variant*> rows;
  for (const Variant& v : registry().variants()) rows.push_back(&v);
  for (const Variant& v : simde_variants()) rows.push_back(&v);
  for (const Variant* v : rows)
    for (const Case& c : kCases) {
      ASSERT_NE(layouts::size_fn(v->ukernel.f32.layout), nullptr) << v->ukernel.f32.layout;
      EXPECT_EQ(layouts::size_fn(v->ukernel.f32.layout)(c.m, c.k), v->ukernel.f32.packed_size(c.m, c.k));
      EXPECT_EQ(layouts::size_fn(v->ukernel.i8.layout)(c.m, c.k), v->ukernel.i8.packed_size(c.m, c.k));
    }
}

TEST(TernarySerialize, HeaderErrorsNameTheArgument) {
  std::mt19937 rng(4);
  const auto words = random_words(9, 40, rng);
  auto w = prepare(words.data(), 9, words_for(40), 40, nullptr, "", 1);
  AlignedBuffer b = to_buffer(*w, false);
  ImportOptions o;
  o.arg = "state_dict['x']";
  try {
    from_buffer(b.data<unsigned char>(), int64_t(b.size()) - 64, nullptr, o);
    FAIL() << "truncated buffer accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("state_dict['x']: ", 0), 0u) << e.what();
  }
  EXPECT_THROW(from_buffer(b.data<unsigned char>() + 64, int64_t(b.size()) - 64, nullptr, o),
               InvalidArgument);
  b.data<unsigned char>()[500] ^= 1;  // payload: only verify sees it
  EXPECT_NO_THROW(import(b));
  o.verify = true;
  EXPECT_THROW(import(b, o), InvalidArgument);
}

// Every layout (each registry row this CPU runs and each SIMDe row, the int8 layout included,
// per-row and group scales): every header byte flipped, bits 0 and 7, one at a time. With
// verify, each flip is refused or gives bitwise the clean result (fp32 and int8 gemv); without,
// the O(1) checks refuse each flip that leaves the header inconsistent with itself (tamper.h;
// the variant is forced, so a renamed variant prepares the same variant again). Each section
// moved by 64 bytes, checksum re-stamped: refused with or without verify.
TEST(TernarySerialize, EveryHeaderByteFlipIsRefusedOrHarmless) {
  std::mt19937 rng(6);
  const auto rows = blob::testing::runnable_rows(registry(), simde_variants());
  for (const Variant* v : rows)
    for (const Case& c : {Case{20, 70, 0}, Case{18, 96, 32}}) {
      const std::string what = std::string(v->name) + " g=" + std::to_string(c.g);
      const auto words = random_words(c.m, c.k, rng);
      const auto scale = random_floats(c.g ? c.m * groups_for(c.k, c.g) : c.m, rng);
      auto w = prepare_variant(*v, words.data(), c.m, c.k, scale.data(), 1, c.g);
      const AlignedBuffer clean = to_buffer(*w, true);
      const int64_t batch = 2;
      const auto x = random_floats(batch * c.k, rng);
      auto run_both = [&](const PreparedWeights& p) {
        if (p.m != c.m || p.k != c.k) {  // another valid shape (no verify): in bounds
          if (p.m <= 100000 && p.k <= 100000) {
            run(p, random_floats(p.k, rng), 1, Act::kF32);
            run(p, random_floats(p.k, rng), 1, Act::kInt8);
          }
          return std::vector<float>{};
        }
        std::vector<float> y = run(p, x, batch, Act::kF32), y8 = run(p, x, batch, Act::kInt8);
        y.insert(y.end(), y8.begin(), y8.end());
        return y;
      };
      auto import_raw = [&](const unsigned char* p, int64_t n, bool verify) {
        ImportOptions o;
        o.verify = verify;
        if (!verify) o.isa = v->name;
        return import_with_simde(p, n, o);
      };
      blob::testing::check_tampering(clean, 4, run_both(*w), run_both, import_raw, what);
    }
}

// Random byte flips in the header and the payload (and whole payloads of one byte value):
// import + gemv (fp32 and int8, batch 1 and 4) either throws InvalidArgument or returns.
// Memory safety itself is what the ASan leg checks.
TEST(TernarySerialize, FuzzedBuffersThrowOrComputeInBounds) {
  std::mt19937 rng(5);
  const auto rows = blob::testing::runnable_rows(registry(), simde_variants());
  blob::testing::FuzzCounts counts;
  for (const Variant* v : rows)
    for (const Case& c : {Case{33, 77, 0}, Case{20, 300, 32}}) {
      const auto words = random_words(c.m, c.k, rng);
      const auto scale = random_floats(c.g ? c.m * groups_for(c.k, c.g) : c.m, rng);
      auto w = prepare_variant(*v, words.data(), c.m, c.k, scale.data(), 1, c.g);
      const AlignedBuffer clean = to_buffer(*w, true);
      const auto fill = [](int t) { return t * 17; };  // every payload byte one value
      blob::testing::fuzz(clean, 160, 16, fill, rng, counts, [&](const AlignedBuffer& b, int trial) {
        ImportOptions o;
        o.isa = v->name;
        try {
          auto got = import_with_simde(b.data<unsigned char>(), int64_t(b.size()), o);
          if (got->k > 100000 || got->m > 100000) {  // a valid header of an empty matrix
            ASSERT_EQ(got->m * got->k, 0);           // (0 x huge K or huge M x 0)
            return;
          }
          const auto x = random_floats(4 * got->k, rng);
          std::vector<float> y(size_t(4 * got->m) + 1);
          gemv(*got, x.data(), 4, nullptr, 0, Act::kF32, 1, y.data());
          gemv(*got, x.data(), 1, nullptr, 0, Act::kF32, 2, y.data());
          gemv(*got, x.data(), 4, nullptr, 0, Act::kInt8, 1, y.data());
        } catch (const std::bad_alloc&) {  // a header must not size an unbounded allocation
          blob::Header h;
          std::memcpy(&h, b.data(), sizeof h);
          ADD_FAILURE() << "bad_alloc from dims " << h.dims[0] << ", " << h.dims[1] << ", "
                        << h.dims[2] << ", " << h.dims[3] << " (trial " << trial << ")";
        }
      });
    }
  EXPECT_GT(counts.threw, 0);
  EXPECT_GT(counts.ran, 0);
}

}  // namespace
}  // namespace cpukern::ternary
