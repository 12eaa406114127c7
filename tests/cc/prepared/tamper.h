// Header tampering for the prepared-weight blob tests of every op (kernels/common/prepared_blob.h):
// flip every header byte, one bit at a time, and check what an import does with it.
//
//   verify=True:  every flip is refused (InvalidArgument) or gives bitwise the clean result.
//   verify=False: the O(1) checks alone must refuse every flip that leaves the header
//                 inconsistent with itself (magic, version, sizes, op, the section table, unused
//                 dims / entries, reserved and pad bytes, a name's zero padding); a flip of the
//                 checksum field changes nothing; a flip inside a variant, micro-kernel, layout
//                 or format name is refused or gives the clean result (the import may prepare the
//                 weights again for the variant asked for); a flip of a used dim may describe
//                 another valid shape (only verify can tell): refused or memory-safe.
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/errors.h"
#include "kernels/common/packed_weights.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/common/registry.h"

namespace cpukern::blob::testing {

// Stores the right checksum for the (edited) header and payload at buf: tampering that
// verify cannot see, for the O(1) checks to catch.
inline void restamp(unsigned char* buf) {
  Header h;
  std::memcpy(&h, buf, sizeof h);
  h.checksum = blob_checksum(h, buf);
  std::memcpy(buf, &h, sizeof h);
}

inline Header header_of(const unsigned char* buf) {
  Header h;
  std::memcpy(&h, buf, sizeof h);
  return h;
}

enum class FlipRule { kRefused, kSame, kSameOrRefused, kAny };

// What flipping header byte `at` of the clean header h may do under verify=False (see above).
inline FlipRule rule_for(const Header& h, size_t at, int ndims) {
  auto in = [&](const auto& field) {
    const size_t from = size_t(reinterpret_cast<const char*>(&field) - reinterpret_cast<const char*>(&h));
    return at >= from && at < from + sizeof field;
  };
  auto name_byte = [&](const auto& field) {  // the name's characters and its terminating NUL
    const size_t from = size_t(reinterpret_cast<const char*>(&field) - reinterpret_cast<const char*>(&h));
    return at - from <= strnlen(field, sizeof field);
  };
  if (in(h.checksum)) return FlipRule::kSame;
  for (const auto* f : {&h.variant, &h.layout})
    if (in(*f)) return name_byte(*f) ? FlipRule::kSameOrRefused : FlipRule::kRefused;
  if (in(h.ukernel)) return name_byte(h.ukernel) ? FlipRule::kSameOrRefused : FlipRule::kRefused;
  if (in(h.format)) return name_byte(h.format) ? FlipRule::kSameOrRefused : FlipRule::kRefused;
  for (int d = 0; d < ndims; ++d)
    if (in(h.dims[d])) return FlipRule::kAny;
  return FlipRule::kRefused;
}

struct FlipCounts {
  int refused = 0, same = 0, other = 0;
};

// Flips every header byte of `clean` (one of `bits` at a time) and imports it with
// import_run(bytes, size, verify), which returns a comparable result of running the imported
// weights (or throws InvalidArgument); `expected` is the clean buffer's result. Checks the
// rules above for verify = true and false; returns the counts per mode (what: for messages).
template <class Result, class ImportRun>
std::pair<FlipCounts, FlipCounts> check_header_flips(const AlignedBuffer& clean, int ndims,
                                                     const Result& expected,
                                                     std::initializer_list<int> bits,
                                                     ImportRun import_run, const std::string& what) {
  const size_t n = clean.size();
  const Header h = header_of(clean.data<unsigned char>());
  AlignedBuffer b{n};
  std::pair<FlipCounts, FlipCounts> counts;
  for (bool verify : {true, false})
    for (size_t at = 0; at < sizeof(Header); ++at)
      for (int bit : bits) {
        std::memcpy(b.data(), clean.data(), n);
        unsigned char* p = b.data<unsigned char>();
        p[at] ^= uint8_t(1u << bit);
        FlipCounts& c = verify ? counts.first : counts.second;
        bool refused = false;
        Result got{};
        try {
          got = import_run(p, int64_t(n), verify);
        } catch (const InvalidArgument&) {
          refused = true;
        }
        const bool same = !refused && got == expected;
        (refused ? c.refused : same ? c.same : c.other)++;
        const std::string where = what + ": header byte " + std::to_string(at) + " bit " +
                                  std::to_string(bit) + (verify ? " (verify)" : " (no verify)");
        if (verify) {
          EXPECT_TRUE(refused || same) << where << ": accepted with another result";
          continue;
        }
        switch (rule_for(h, at, ndims)) {
          case FlipRule::kRefused:
            EXPECT_TRUE(refused) << where << ": accepted a header inconsistent with itself";
            break;
          case FlipRule::kSame:
            EXPECT_TRUE(same) << where << ": the checksum field changed the result";
            break;
          case FlipRule::kSameOrRefused:
            EXPECT_TRUE(refused || same) << where << ": a name flip gave another result";
            break;
          case FlipRule::kAny:
            break;
        }
      }
  return counts;
}

// Moves each non-empty section by +-64 bytes (checksum re-stamped, so only the O(1) section
// checks can see it) and imports with verify true and false: refused, naming the section.
template <class Import>
void check_moved_sections(const AlignedBuffer& clean, Import import, const std::string& what) {
  const size_t n = clean.size();
  const Header h = header_of(clean.data<unsigned char>());
  AlignedBuffer b{n};
  int moved = 0;
  for (uint32_t i = 0; i < h.sections; ++i) {
    if (h.section[i].size == 0) continue;
    for (int64_t delta : {-64, 64})
      for (bool verify : {true, false}) {
        std::memcpy(b.data(), clean.data(), n);
        unsigned char* p = b.data<unsigned char>();
        Header t = h;
        t.section[i].offset = uint64_t(int64_t(t.section[i].offset) + delta);
        std::memcpy(p, &t, sizeof t);
        restamp(p);
        const std::string where = what + ": section " + std::to_string(i) + " moved by " +
                                  std::to_string(delta) + (verify ? " (verify)" : " (no verify)");
        try {
          import(p, int64_t(n), verify);
          ADD_FAILURE() << where << ": accepted";
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("corrupted header (section " + std::to_string(i)),
                    std::string::npos)
              << where << ": " << e.what();
        }
        ++moved;
      }
  }
  EXPECT_GT(moved, 0) << what;
}

// Fuzz trial `trial` of a serialised buffer: a copy of `clean` whose payload bytes are all
// fill(trial) for the first `fills` trials, else with 1 to 4 random bit flips, in the header
// (odd trials) or anywhere (even ones).
template <class Fill, class Rng>
AlignedBuffer fuzzed_copy(const AlignedBuffer& clean, int trial, int fills, Fill fill, Rng& rng) {
  const uint64_t n = clean.size(), head = sizeof(Header);
  AlignedBuffer b{static_cast<size_t>(n)};
  std::memcpy(b.data(), clean.data(), size_t(n));
  auto* p = b.data<unsigned char>();
  if (trial < fills) {
    std::memset(p + head, fill(trial), size_t(n - head));
  } else {
    for (int f = 0, flips = 1 + int(rng() % 4); f < flips; ++f)
      p[trial % 2 ? rng() % head : rng() % n] ^= uint8_t(1u << (rng() % 8));
  }
  return b;
}

// check_header_flips (bits 0 and 7 of every header byte; under verify each flip is refused)
// and check_moved_sections, for an op whose import_raw(bytes, size, verify) returns its
// prepared weights and run(weights) a comparable result of running them (`expected`: the
// clean weights' result).
template <class Result, class Run, class ImportRaw>
void check_tampering(const AlignedBuffer& clean, int ndims, const Result& expected, Run run,
                     ImportRaw import_raw, const std::string& what) {
  const auto counts = check_header_flips(
      clean, ndims, expected, {0, 7},
      [&](const unsigned char* p, int64_t n, bool verify) { return run(*import_raw(p, n, verify)); },
      what);
  EXPECT_EQ(counts.first.refused, int(sizeof(Header)) * 2) << what;
  check_moved_sections(clean, import_raw, what);
}

// The registry a serialize test imports with (the ops' from_buffer taking the rows): the
// op's registry with the SIMDe rows (any host) added to its catalogue, reached by name as
// forced rows are, so that a buffer a SIMDe row wrote imports as a view of that row. One per
// op, built on first use.
template <class Ukernel>
const Registry<Ukernel>& with_simde_rows(const Registry<Ukernel>& registry,
                                         const std::vector<Variant<Ukernel>>& simde) {
  static const Registry<Ukernel> rows(registry.op(), registry.variants(), [&] {
    std::vector<Variant<Ukernel>> catalogue = registry.catalogue();
    catalogue.insert(catalogue.end(), simde.begin(), simde.end());
    return catalogue;
  }());
  return rows;
}
// The registry itself, or with_simde_rows of it.
template <class Ukernel>
const Registry<Ukernel>& import_registry(const Registry<Ukernel>& registry,
                                         const std::vector<Variant<Ukernel>>& simde,
                                         bool with_simde) {
  return with_simde ? with_simde_rows(registry, simde) : registry;
}

// The rows a serialize test prepares with: the registry's rows this CPU runs, then the SIMDe
// rows (any host).
template <class Registry, class Row>
std::vector<const Row*> runnable_rows(const Registry& registry, const std::vector<Row>& simde) {
  std::vector<const Row*> rows;
  for (const Row& v : registry.variants())
    if (v.supported()) rows.push_back(&v);
  for (const Row& v : simde) rows.push_back(&v);
  return rows;
}

// Outcomes of fuzz(): both must occur in a meaningful fuzz.
struct FuzzCounts {
  int threw = 0, ran = 0;
};

// `trials` fuzzed copies of `clean` (fuzzed_copy), each given to use(buffer, trial), which
// imports and runs it: it returns (counted as ran) or throws InvalidArgument (threw).
template <class Fill, class Rng, class Use>
void fuzz(const AlignedBuffer& clean, int trials, int fills, Fill fill, Rng& rng,
          FuzzCounts& counts, Use use) {
  for (int trial = 0; trial < trials; ++trial) {
    AlignedBuffer b = fuzzed_copy(clean, trial, fills, fill, rng);
    try {
      use(b, trial);
      ++counts.ran;
    } catch (const InvalidArgument&) {
      ++counts.threw;
    }
  }
}

// A prepare_into target: `size` bytes of garbage (the packing must write every byte itself),
// 64-byte aligned, that its owner (held by the weights) keeps alive.
inline BlobTarget garbage_target(int64_t size, unsigned char fill = 0xA5) {
  auto mem = std::make_shared<AlignedBuffer>(size_t(size));
  std::memset(mem->data(), fill, size_t(size));
  return {mem->data<unsigned char>(), size, mem};
}

// prepare_into's result: weights viewing `t`, which holds exactly the bytes `expected`
// (what serialize wrote for the same weights packed the usual way).
inline void expect_blob(const PackedWeights& w, const BlobTarget& t, const AlignedBuffer& expected) {
  ASSERT_TRUE(w.is_view()) << "not a view of the buffer packed into";
  EXPECT_EQ(w.buffer.p, t.p);
  EXPECT_EQ(w.buffer.size, t.size);
  ASSERT_EQ(size_t(t.size), expected.size());
  EXPECT_EQ(0, std::memcmp(t.p, expected.data(), expected.size())) << "not the serialised bytes";
  const Header h = header_of(t.p);
  for (int i = 0; i < w.sections(); ++i)
    if (w.section_bytes(i)) {
      EXPECT_EQ(w.section(i), t.p + h.section[i].offset) << "section " << i;
    }
}

// A call that must throw InvalidArgument naming "out" (with `mentions` in the message).
template <class F>
void expect_out_error(F&& f, const std::string& mentions = "") {
  try {
    f();
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("out: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(mentions), std::string::npos) << e.what();
  }
}

}  // namespace cpukern::blob::testing
