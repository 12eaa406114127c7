// The serialised form of MoE packed experts (moe.h serialize / from_buffer, serialize.cc): round
// trips on every variant this CPU runs and the SIMDe rows, in every weight format (zero-copy
// views, bitwise equal fused_moe), header errors naming the argument, every header byte
// flipped (refused or harmless, tests/cc/prepared/tamper.h), the section moved, and a fuzz of
// header and payload bytes
// (including payloads of one byte value: MXFP4 scale 255, int8 -128): import + fused_moe throw
// InvalidArgument or compute in bounds. Memory safety itself: the ASan leg.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/common/errors.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/ukernel.h"
#include "tests/cc/moe/list_rows.h"
#include "tests/cc/prepared/tamper.h"

namespace cpukern::moe {
namespace {

constexpr int64_t kE = 3, kH = 64, kI = 32, kT = 4, kTopk = 2;

bf16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return bf16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

std::vector<bf16_t> random_bf16(int64_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<bf16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = to_bf16(d(rng));
  return v;
}

// e experts (kE unless given) of random weights; into: packed straight into that buffer.
std::shared_ptr<const PackedExperts> pack(const Variant& v, WeightFormat f, int64_t o, int64_t i,
                                          std::mt19937& rng, const BlobTarget* into = nullptr,
                                          int64_t e = kE) {
  if (f == WeightFormat::kBf16) {
    const auto w = random_bf16(e * o * i, 0.1f, rng);
    return prepare(w.data(), e, o, i, v, into);
  }
  if (f == WeightFormat::kMxfp4 || f == WeightFormat::kMxfp4A8) {
    std::vector<uint8_t> blocks(static_cast<size_t>(e * o * i / 2)), scales(static_cast<size_t>(e * o * i / 32));
    for (auto& b : blocks) b = uint8_t(rng());
    for (auto& s : scales) s = uint8_t(120 + rng() % 8);
    return prepare_mxfp4(blocks.data(), scales.data(), e, o, i, v, f, into);
  }
  std::vector<int8_t> q(static_cast<size_t>(e * o * i));
  for (auto& x : q) x = int8_t(int(rng() % 255) - 127);
  std::vector<float> s(static_cast<size_t>(e * o), 0.01f);
  return prepare_int8(q.data(), s.data(), e, o, i, v, into);
}

std::shared_ptr<const PackedExperts> import(const unsigned char* p, int64_t size, bool verify,
                                            const std::string& isa, const std::string& arg,
                                            bool with_simde = false) {
  // with_simde: the SIMDe rows too (a buffer one of them wrote imports as a view)
  return from_buffer(p, size, nullptr, blob::import_options<ImportOptions>(verify, isa, arg),
                     blob::testing::import_registry(registry(), simde_variants(), with_simde));
}

AlignedBuffer to_buffer(const PackedExperts& w) {
  AlignedBuffer b{static_cast<size_t>(serialized_size(w))};
  serialize(w, b.data<unsigned char>(), int64_t(b.size()));
  return b;
}

struct Routing {
  std::vector<bf16_t> x;
  std::vector<float> tw;
  std::vector<int32_t> ids;
};

Routing routing(std::mt19937& rng) {
  Routing r{random_bf16(kT * kH, 1.0f, rng), {}, {}};
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t j = 0; j < kTopk; ++j) {
      r.tw.push_back(0.5f);
      r.ids.push_back(int32_t((t + j) % kE));
    }
  return r;
}

std::vector<bf16_t> run(const PackedExperts& w13, const PackedExperts& w2, const Routing& r) {
  std::vector<bf16_t> out(static_cast<size_t>(kT * kH));
  fused_moe(r.x.data(), kT, kH, w13, w2, r.tw.data(), r.ids.data(), kTopk, Activation::kSilu,
            nullptr, nullptr, false, 1, out.data());
  return out;
}

std::vector<const Variant*> rows() {
  std::vector<const Variant*> out;
  for (const Variant& v : registry().variants())
    if (v.supported()) out.push_back(&v);
  for (const Variant& v : simde_variants()) out.push_back(&v);
  return out;
}

const WeightFormat kFormats[] = {WeightFormat::kBf16, WeightFormat::kMxfp4, WeightFormat::kInt8,
                                 WeightFormat::kMxfp4A8};

TEST(MoeBlob, RoundTripIsAZeroCopyViewWithIdenticalResults) {
  std::mt19937 rng(1);
  for (const Variant* v : rows())
    for (WeightFormat f : kFormats) {
      SCOPED_TRACE(std::string(v->name) + " " + format_name(f));
      auto w13 = pack(*v, f, 2 * kI, kH, rng);
      auto w2 = pack(*v, f, kH, kI, rng);
      const AlignedBuffer b13 = to_buffer(*w13), b2 = to_buffer(*w2);
      auto v13 = import(b13.data<unsigned char>(), int64_t(b13.size()), true, "", "w13", true);
      auto v2 = import(b2.data<unsigned char>(), int64_t(b2.size()), true, "", "w2", true);
      EXPECT_EQ(static_cast<const void*>(v13->packed()), b13.data<unsigned char>() + 448);
      EXPECT_EQ(v13->format, f);
      const Routing r = routing(rng);
      EXPECT_EQ(run(*w13, *w2, r), run(*v13, *v2, r));
    }
}

// Packing straight into the serialised form (prepare*'s into), on every row this CPU runs and
// every SIMDe row, in every format: into a buffer of garbage, the bytes serialize writes for
// the same experts packed the usual way, viewed in place; fused_moe on them gives bitwise the
// same result. One expert of one row, ragged shapes.
TEST(MoeBlob, PrepareIntoWritesTheSerialisedBytes) {
  std::mt19937 rng(5);
  for (const Variant* v : rows())
    for (WeightFormat f : kFormats) {
      const bool mx = f == WeightFormat::kMxfp4 || f == WeightFormat::kMxfp4A8;
      for (const auto& [e, o, i] : std::vector<std::array<int64_t, 3>>{
               {1, 1, mx ? 32 : 1}, {2, 17, mx ? 64 : 45}, {kE, 2 * kI, kH}, {kE, kH, kI}}) {
        SCOPED_TRACE(std::string(v->name) + " " + format_name(f) + " " + std::to_string(e) + "x" +
                     std::to_string(o) + "x" + std::to_string(i));
        std::mt19937 same = rng;
        auto w = pack(*v, f, o, i, rng, nullptr, e);
        const AlignedBuffer expected = to_buffer(*w);
        const BlobTarget t = blob::testing::garbage_target(int64_t(expected.size()));
        auto direct = pack(*v, f, o, i, same, &t, e);
        blob::testing::expect_blob(*direct, t, expected);
        EXPECT_EQ(direct->format, f);
      }
      SCOPED_TRACE(std::string(v->name) + " " + format_name(f) + " fused_moe");
      std::mt19937 same = rng;
      auto w13 = pack(*v, f, 2 * kI, kH, rng), w2 = pack(*v, f, kH, kI, rng);
      const BlobTarget t13 = blob::testing::garbage_target(serialized_size(*w13));
      const BlobTarget t2 = blob::testing::garbage_target(serialized_size(*w2));
      auto d13 = pack(*v, f, 2 * kI, kH, same, &t13), d2 = pack(*v, f, kH, kI, same, &t2);
      const Routing r = routing(rng);
      EXPECT_EQ(run(*w13, *w2, r), run(*d13, *d2, r));
    }
}

// prepared_size is serialize's size for the registry's rows; prepare*'s into refuses a wrong
// size, a misaligned buffer and one over the weights, naming "out", before writing anything.
TEST(MoeBlob, PrepareIntoSizesAndOutErrors) {
  std::mt19937 rng(6);
  for (const Variant& v : registry().variants()) {
    if (!v.supported()) continue;
    for (WeightFormat f : kFormats) {
      auto w = pack(v, f, 40, 96, rng);
      EXPECT_EQ(prepared_size(f, kE, 40, 96, v.name), serialized_size(*w)) << v.name;
    }
  }
  const auto w = random_bf16(kE * 8 * 64, 0.1f, rng);
  const int64_t n = prepared_size(WeightFormat::kBf16, kE, 8, 64, "");
  BlobTarget t = blob::testing::garbage_target(n + 64);
  for (const int64_t wrong : {n - 64, n + 64}) {
    t.size = wrong;
    blob::testing::expect_out_error([&] { prepare(w.data(), kE, 8, 64, "", &t); },
                                    std::to_string(n) + " bytes");
  }
  t.p += 32;
  t.size = n;
  blob::testing::expect_out_error([&] { prepare(w.data(), kE, 8, 64, "", &t); }, "64-byte");
  BlobTarget over = blob::testing::garbage_target(n);
  const auto* in = reinterpret_cast<const bf16_t*>(over.p + 448);
  blob::testing::expect_out_error([&] { prepare(in, 1, 8, 64, "", &over); }, "'w'");
  EXPECT_EQ(over.p[0], 0xA5) << "nothing is written before the checks";
  EXPECT_THROW(prepared_size(WeightFormat::kMxfp4, kE, 8, 48, ""), InvalidArgument);  // I % 32
}

TEST(MoeBlob, HeaderErrorsNameTheArgument) {
  std::mt19937 rng(2);
  auto w = pack(registry().default_variant(), WeightFormat::kBf16, 2 * kI, kH, rng);
  AlignedBuffer b = to_buffer(*w);
  EXPECT_THROW(import(b.data<unsigned char>(), int64_t(b.size()) - 64, false, "", "w13"),
               InvalidArgument);
  // A packing this import must refuse, naming the argument and the variant it was made for.
  auto expect_refused = [](const AlignedBuffer& buf, const char* isa, const char* what) {
    try {
      import(buf.data<unsigned char>(), int64_t(buf.size()), false, isa, "w13");
      ADD_FAILURE() << what << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("w13: prepared for variant"), std::string::npos) << e.what();
    }
  };
  if (std::string(registry().default_variant().name) != "reference")
    expect_refused(b, "reference", "another variant's packing");
  {  // A layout word the micro-kernel does not write (a buffer of an older byte order of the
     // same micro-kernel name): refused, not misread.
    AlignedBuffer c = to_buffer(*w);
    auto* h = reinterpret_cast<blob::Header*>(c.data<unsigned char>());
    std::memset(h->layout, 0, sizeof(h->layout));
    std::memcpy(h->layout, "older", 5);
    expect_refused(c, "", "a packing of another layout");
  }
  b.data<unsigned char>()[1000] ^= 1;
  EXPECT_NO_THROW(import(b.data<unsigned char>(), int64_t(b.size()), false, "", "w13"));
  EXPECT_THROW(import(b.data<unsigned char>(), int64_t(b.size()), true, "", "w13"),
               InvalidArgument);
}

// Every layout (each row this CPU runs and each SIMDe row, bf16, MXFP4 and int8): every header
// byte of the w13 blob flipped, bits 0 and 7, one at a time. With verify, each flip is refused
// or gives bitwise the clean fused_moe; without, the O(1) checks refuse each flip that leaves
// the header inconsistent with itself (tamper.h; MoE never prepares again, so a renamed
// variant or micro-kernel is refused). The section moved by 64 bytes, checksum re-stamped:
// refused either way.
TEST(MoeBlob, EveryHeaderByteFlipIsRefusedOrHarmless) {
  std::mt19937 rng(4);
  for (const Variant* v : rows())
    for (WeightFormat f : kFormats) {
      const std::string what = std::string(v->name) + " " + format_name(f);
      auto w13 = pack(*v, f, 2 * kI, kH, rng);
      auto w2 = pack(*v, f, kH, kI, rng);
      const AlignedBuffer clean = to_buffer(*w13);
      const Routing r = routing(rng);
      auto import_raw = [&](const unsigned char* p, int64_t n, bool verify) {
        return import(p, n, verify, "", "w13", true);
      };
      auto run_w13 = [&](const PackedExperts& got) {
        // Another valid shape (no verify) cannot run with this w2: its header was read in bounds.
        if (got.e != kE || got.o != 2 * kI || got.i != kH) return std::vector<bf16_t>{};
        return run(got, *w2, r);
      };
      const auto counts = blob::testing::check_header_flips(
          clean, 3, run(*w13, *w2, r), {0, 7},
          [&](const unsigned char* p, int64_t n, bool verify) { return run_w13(*import_raw(p, n, verify)); },
          what);
      EXPECT_EQ(counts.first.refused, 448 * 2) << what;  // under verify, every flip
      blob::testing::check_moved_sections(clean, import_raw, what);
    }
}

TEST(MoeBlob, FuzzedBuffersThrowOrComputeInBounds) {
  std::mt19937 rng(3);
  int threw = 0, ran = 0;
  for (const Variant* v : rows())
    for (WeightFormat f : kFormats) {
      auto w13 = pack(*v, f, 2 * kI, kH, rng);
      auto w2 = pack(*v, f, kH, kI, rng);
      const AlignedBuffer clean = to_buffer(*w13);
      const int64_t n = int64_t(clean.size());
      const Routing r = routing(rng);
      for (int trial = 0; trial < 40; ++trial) {
        AlignedBuffer b{static_cast<size_t>(n)};
        std::memcpy(b.data(), clean.data(), size_t(n));
        auto* p = b.data<unsigned char>();
        if (trial < 4) {
          const int fill[4] = {0xFF, 0x80, 0x7F, 0x00};  // scale 255, int8 -128, ...
          std::memset(p + 448, fill[trial], size_t(n - 448));
        } else {
          for (int k = 0, flips = 1 + int(rng() % 4); k < flips; ++k) {
            const int64_t at = trial % 2 ? int64_t(rng() % 448) : int64_t(rng() % uint64_t(n));
            p[at] ^= uint8_t(1u << (rng() % 8));
          }
        }
        try {
          auto got = import(p, n, false, "", "w13", true);
          if (got->o != 2 * kI || got->i != kH || got->e != kE) {  // a valid header, another shape
            ++ran;
            continue;
          }
          run(*got, *w2, r);
          ++ran;
        } catch (const InvalidArgument&) {
          ++threw;
        }
      }
    }
  EXPECT_GT(threw, 0);
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace cpukern::moe
