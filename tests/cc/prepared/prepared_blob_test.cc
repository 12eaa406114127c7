// The prepared-weight blob code every op shares (kernels/common/prepared_blob.h), on a
// synthetic op: each O(1) header check refuses its inconsistency with its message (the
// checksum re-stamped, so that only parse() can see it), the checksum covers every header
// byte and the payload, and version 1 buffers are refused. The ops' own tests
// (tests/cc/{ternary,widely_linear,moe}/serialize_test.cc) flip every header byte of real blobs.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/errors.h"
#include "kernels/common/prepared_blob.h"
#include "tests/cc/prepared/tamper.h"

namespace cpukern::blob {
namespace {

using testing::restamp;

constexpr OpFormat kUnit{"unit", 2, 3};
constexpr int64_t kSizes[3] = {100, 0, 64};  // padded 128, empty, 64: total 448 + 192

AlignedBuffer make(int64_t extra = 0) {
  const LayoutPlan pl = plan(kSizes, 3);
  AlignedBuffer b{size_t(pl.total + uint64_t(extra))};
  auto* p = b.data<unsigned char>();
  std::memset(p, 0, b.size());
  for (uint64_t i = sizeof(Header); i < pl.total; ++i) p[i] = uint8_t(i * 7 + 3);
  const int64_t dims[2] = {5, 7};
  finish(make_header(kUnit.op, "v", "uk", "lay", "", dims, 2, pl), p);
  return b;
}

Header parse_of(const AlignedBuffer& b) {
  return parse(b.data<unsigned char>(), int64_t(b.size()), kUnit, "buf");
}

TEST(PreparedBlob, CleanBlobParsesVerifiesAndGivesExactSections) {
  const AlignedBuffer b = make();
  const auto* p = b.data<unsigned char>();
  const Header h = parse_of(b);
  EXPECT_EQ(h.version, 2u);
  EXPECT_NO_THROW(verify_checksum(h, p, "buf"));
  EXPECT_EQ(section(h, p, 0, 100, "buf", "zero"), p + 448);
  EXPECT_EQ(section(h, p, 1, 0, "buf", "one"), nullptr);
  EXPECT_EQ(section(h, p, 2, 64, "buf", "two"), p + 448 + 128);
  EXPECT_THROW(section(h, p, 0, 99, "buf", "zero"), InvalidArgument);
  EXPECT_THROW(section(h, p, 1, 64, "buf", "one"), InvalidArgument);
  EXPECT_THROW(section(h, p, 3, 64, "buf", "three"), InvalidArgument);
}

// The stored checksum is checksum() of the header with its checksum field zeroed, then the
// payload: one pass, and any changed byte of either is a mismatch.
TEST(PreparedBlob, ChecksumCoversEveryHeaderByteAndThePayload) {
  const AlignedBuffer b = make();
  const Header h = parse_of(b);
  std::vector<unsigned char> flat(b.data<unsigned char>(), b.data<unsigned char>() + b.size());
  std::memset(flat.data() + offsetof(Header, checksum), 0, 8);
  EXPECT_EQ(h.checksum, checksum(flat.data(), flat.size()));
  AlignedBuffer t{b.size()};
  for (size_t at = 0; at < b.size(); ++at)
    for (int bit : {0, 3, 7}) {
      std::memcpy(t.data(), b.data(), b.size());
      t.data<unsigned char>()[at] ^= uint8_t(1u << bit);
      // Refused by parse, or parsed and then refused by the checksum (h is the clean header
      // when the flip is in the payload; the tampered one otherwise).
      try {
        const Header th = parse_of(t);
        EXPECT_THROW(verify_checksum(th, t.data<unsigned char>(), "buf"), InvalidArgument)
            << "byte " << at << " bit " << bit;
      } catch (const InvalidArgument&) {
        EXPECT_LT(at, sizeof(Header)) << "a payload flip refused by the O(1) checks";
      }
    }
}

TEST(PreparedBlob, Version1IsRefusedWithOrWithoutVerify) {
  AlignedBuffer b = make();
  auto* h = reinterpret_cast<Header*>(b.data<unsigned char>());
  h->version = 1;
  restamp(b.data<unsigned char>());
  try {
    parse_of(b);
    FAIL() << "version 1 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("buf: prepared-weight format version 1 is no longer read"),
              std::string::npos)
        << e.what();
  }
  h->version = 3;
  restamp(b.data<unsigned char>());
  EXPECT_THROW(parse_of(b), InvalidArgument);
}

// Each header edit (checksum re-stamped) is refused by parse() alone, with its message.
TEST(PreparedBlob, InconsistentHeadersAreRefusedByTheO1Checks) {
  struct Edit {
    const char* what;
    std::function<void(Header&)> edit;
    const char* message;
  };
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const std::vector<Edit> edits = {
      {"header size", [](Header& h) { h.header_bytes = 512; }, "(header size 512)"},
      {"name padding", [](Header& h) { h.variant[20] = 'x'; }, "zero-padded"},
      {"unterminated name", [](Header& h) { std::memset(h.format, 'a', sizeof h.format); },
       "zero-padded"},
      {"op", [](Header& h) { h.op[0] = 'v'; }, "expected prepared weights of unit"},
      {"reserved", [](Header& h) { h.reserved = 1; }, "reserved bytes"},
      {"pad", [](Header& h) { h.pad[3] = 1; }, "reserved bytes"},
      {"unused dim", [](Header& h) { h.dims[2] = 1; }, "dim 2 set"},
      {"last dim", [](Header& h) { h.dims[7] = -1; }, "dim 7 set"},
      {"section count", [](Header& h) { h.sections = 2; }, "2 sections"},
      {"section count high", [](Header& h) { h.sections = 9; }, "9 sections"},
      {"unused entry", [](Header& h) { h.section[3].size = 64; }, "unused section entry 3"},
      {"unused entry offset", [](Header& h) { h.section[7].offset = 448; }, "unused section entry 7"},
      {"empty section's offset", [](Header& h) { h.section[1].offset = 576; }, "offset 0"},
      {"into the header", [](Header& h) { h.section[0].offset = 0; }, "overlaps the header"},
      {"into the header 2", [](Header& h) { h.section[0].offset = 384; }, "overlaps the header"},
      {"misaligned", [](Header& h) { h.section[0].offset = 449; }, "not 64-byte aligned"},
      {"back into section 0", [](Header& h) { h.section[2].offset -= 64; },
       "section 2 at 512 + 64 bytes overlaps or precedes"},
      {"gap", [](Header& h) { h.section[0].offset += 64; }, "leaves a gap"},
      {"past the end", [](Header& h) { h.section[2].offset += 64; }, "outside the 640-byte buffer"},
      {"wrapping offset", [](Header& h) { h.section[0].offset = kMax - 63; }, "outside"},
      {"huge size", [](Header& h) { h.section[0].size = kMax; }, "outside"},
      {"size", [](Header& h) { h.section[0].size = 160; },
       "section 2 at 576 + 64 bytes overlaps or precedes the section before it, which ends at 640"},
      {"total", [](Header& h) { h.total_bytes += 64; }, "header says 704 bytes"},
  };
  for (const Edit& e : edits) {
    AlignedBuffer b = make();
    Header h;
    std::memcpy(&h, b.data(), sizeof h);
    e.edit(h);
    std::memcpy(b.data(), &h, sizeof h);
    // A total past the buffer has no checksum to restamp (it would read past the buffer);
    // parse() refuses it before any checksum is read.
    if (h.total_bytes <= b.size()) restamp(b.data<unsigned char>());
    try {
      parse_of(b);
      ADD_FAILURE() << e.what << ": accepted";
    } catch (const InvalidArgument& x) {
      EXPECT_NE(std::string(x.what()).find(e.message), std::string::npos) << e.what << ": " << x.what();
      EXPECT_EQ(std::string(x.what()).rfind("buf: ", 0), 0u) << x.what();
    }
  }
}

// Bytes past the last section's padded end, with the header's total saying so: refused.
TEST(PreparedBlob, TrailingBytesAreRefused) {
  AlignedBuffer b = make(64);
  Header h;
  std::memcpy(&h, b.data(), sizeof h);
  h.total_bytes += 64;
  std::memcpy(b.data(), &h, sizeof h);
  restamp(b.data<unsigned char>());
  try {
    parse_of(b);
    FAIL() << "trailing bytes accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("the buffer ends at 704, its last section's padded end is at 640"),
              std::string::npos)
        << e.what();
  }
}

TEST(PreparedBlob, BufferChecks) {
  const AlignedBuffer b = make();
  const auto* p = b.data<unsigned char>();
  EXPECT_THROW(parse(nullptr, 448, kUnit, "buf"), InvalidArgument);
  EXPECT_THROW(parse(p, 447, kUnit, "buf"), InvalidArgument);
  EXPECT_THROW(parse(p, int64_t(b.size()) - 64, kUnit, "buf"), InvalidArgument);
  AlignedBuffer c{b.size() + 64};
  std::memcpy(c.data<unsigned char>() + 8, p, b.size());
  EXPECT_THROW(parse(c.data<unsigned char>() + 8, int64_t(b.size()), kUnit, "buf"), InvalidArgument);
  AlignedBuffer d{b.size()};
  std::memcpy(d.data(), p, b.size());
  d.data<unsigned char>()[0] ^= 1;
  EXPECT_THROW(parse_of(d), InvalidArgument);
}

}  // namespace
}  // namespace cpukern::blob
