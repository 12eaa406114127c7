// The serialised form of a prepared (kernel-layout) weight: one contiguous byte buffer =
// a fixed little-endian header + 64-byte aligned payload sections. Ops (ternary,
// widely_linear, moe) write it from their prepared objects and view it back zero-copy.
//
// Safety contract (format version 2):
//  - parse() validates the header against itself and the buffer's size in O(1), and throws
//    InvalidArgument naming the caller's argument for any inconsistency: magic, version,
//    header size, every name NUL-terminated and zero-padded, the op and its number of dims
//    and sections, unused dims / section entries / reserved / pad all zero, and the sections
//    exactly where serialize puts them (each at a multiple of 64 at or after the header, in
//    order, not overlapping, inside the buffer with overflow-checked arithmetic, the buffer
//    ending at the last one's padded end).
//  - The op then checks its dims' ranges and each section's exact size against what its
//    kernels read (section(): every section goes through it), so for ANY payload bytes the
//    kernels stay in bounds and the sections are where the header says.
//  - The checksum covers the header (every field, the checksum field read as zero) and the
//    payload; it is verified only when asked (verify_checksum, the imports' `verify`): O(bytes),
//    at import time, never per call. Under verify, any change to the bytes is refused (up to
//    a 64-bit checksum collision), so a header edit can never make an import re-prepare for
//    another variant or read a section elsewhere.
//  - Version 1 buffers (whose checksum covered only the payload) are refused, with or
//    without verify: their header cannot be verified, and this format is not a storage
//    format across releases (export them again from the weights).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/errors.h"

namespace cpukern::blob {

inline constexpr char kMagic[8] = {'C', 'P', 'U', 'K', 'P', 'R', 'E', 'P'};
inline constexpr uint32_t kVersion = 2;  // 1: the checksum covered only the payload
inline constexpr int kMaxSections = 8;
inline constexpr int kMaxDims = 8;
inline constexpr int64_t kAlign = 64;

// The whole serialised buffer that a from_buffer view reads (empty when the weights own their
// memory): an op's output must not overlap it (check_disjoint in errors.h).
struct View {
  const unsigned char* p = nullptr;
  int64_t size = 0;
};

struct Section {
  uint64_t offset;  // from the start of the buffer; a multiple of 64 (or 0 when size is 0)
  uint64_t size;    // bytes
};

// 448 bytes, all fields little-endian, names NUL-padded.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(Header); the first section starts at or after it
  char op[16];            // "ternary" | "widely_linear" | "moe"
  char variant[32];       // the registry row that prepared it ("avx2", "neon", ...)
  char ukernel[96];       // its micro-kernel's full name
  char layout[32];        // the layout word the kernel reads ("lut3r8", "g3r8x4", ...)
  char format[16];        // op-specific payload format ("", "bf16", "mxfp4", ...)
  int64_t dims[kMaxDims];  // op-specific shapes (documented by each op)
  uint64_t total_bytes;    // the whole buffer
  uint64_t checksum;       // of the header (this field as 0), then [header_bytes, total_bytes)
  uint32_t sections;       // used entries of section[]
  uint32_t reserved;       // 0
  Section section[kMaxSections];
  char pad[448 - 8 - 4 - 4 - 16 - 32 - 96 - 32 - 16 - 8 * kMaxDims - 8 - 8 - 4 - 4 -
           16 * kMaxSections];
};
static_assert(sizeof(Header) == 448 && sizeof(Header) % kAlign == 0, "header is 64-byte sized");

// Section offsets for these sizes (each 64-byte aligned after the header) and the total.
struct LayoutPlan {
  Section section[kMaxSections] = {};
  int sections = 0;
  uint64_t total = 0;
};
LayoutPlan plan(const int64_t* sizes, int n);

// A header for `plan` with the names and dims set (checksum 0: finish() fills it).
Header make_header(const char* op, const std::string& variant, const std::string& ukernel,
                   const std::string& layout, const std::string& format, const int64_t* dims,
                   int ndims, const LayoutPlan& plan);
// Writes the header to buf (total_bytes long, the sections already written) with the checksum.
void finish(Header h, unsigned char* buf);

// 64-bit checksum of n bytes (order-sensitive; four independent lanes, ~several GB/s).
uint64_t checksum(const unsigned char* p, uint64_t n);
// The checksum a header stores: of the header with its checksum field zeroed, then of the
// payload [header_bytes, total_bytes) at buf (one pass; h is already parsed or being made).
uint64_t blob_checksum(const Header& h, const unsigned char* buf);

// What an op's blobs look like: its name, how many dims and section entries it writes.
struct OpFormat {
  const char* op;
  int dims;      // dims[dims..] are 0
  int sections;  // Header::sections == sections; entries past it are 0
};

// O(1) validation of buf (size bytes) as a blob of `fmt` (see the safety contract above);
// throws naming `arg`. The returned header is a copy (the caller's bytes may change afterwards
// without affecting it).
Header parse(const unsigned char* buf, int64_t size, const OpFormat& fmt, const std::string& arg);
// Throws naming `arg` if the checksum of the header and payload differs from the stored one.
void verify_checksum(const Header& h, const unsigned char* buf, const std::string& arg);

// Section i of a parsed header: its pointer (nullptr when empty), after checking its exact
// expected size. Every section of every import goes through here.
const unsigned char* section(const Header& h, const unsigned char* buf, int i, int64_t expected,
                             const std::string& arg, const char* what);

// How an import treats a buffer (every op's from_buffer takes one; Row: the op's Variant).
// Whether it prepared again: the result's is_view() is false.
template <class Row>
struct ImportOptions {
  bool verify = false;           // verify the checksum (header and payload): O(bytes)
  std::string isa;               // "" = the variant that made it (else the default), or this one
  int threads = 0;               // for preparing again (0 = the default)
  std::string arg = "buffer";    // the argument errors name
  bool allow_reprepare = true;   // false: a buffer of another variant is an error (per-call
                                 // paths never prepare; MoE packings can never be unpacked)
};

// An op's ImportOptions (Options) with these fields set.
template <class Options>
Options import_options(bool verify, const std::string& isa, const std::string& arg,
                       int threads = 0, bool allow_reprepare = true) {
  Options o;
  o.verify = verify;
  o.isa = isa;
  o.arg = arg;
  o.threads = threads;
  o.allow_reprepare = allow_reprepare;
  return o;
}

// NUL-terminated name fields as strings.
std::string name(const char (&field)[16]);
std::string name(const char (&field)[32]);
std::string name(const char (&field)[96]);

// The rows an import chooses between, from `rows` (the op's registry: shipped rows, then the
// catalogue): made_by, the row named by the header whose micro-kernel and layout match
// (same_kernel(row, ukernel, layout)) and that this CPU runs, or nullptr; want, the row to use:
// made_by unless `isa` forces one (rows.select(isa), which throws naming "variant") or made_by is
// null.
template <class Registry, class SameKernel, class Row = typename Registry::Row>
std::pair<const Row*, const Row*> import_rows(const Header& h, const Registry& rows,
                                              const std::string& isa, SameKernel same_kernel) {
  const std::string variant = name(h.variant), ukernel = name(h.ukernel), layout = name(h.layout);
  const Row* made_by = nullptr;
  for (const auto* table : {&rows.variants(), &rows.catalogue()})  // catalogue: a forced row's blob
    for (const Row& r : *table)
      if (!made_by && variant == r.name && same_kernel(r, ukernel, layout) && r.supported())
        made_by = &r;
  const Row* want = isa.empty() && made_by ? made_by : &rows.select(isa);
  return {made_by, want};
}

// parse(), then verify_checksum() when opts.verify (first: a changed header says so).
template <class Row>
Header parse_import(const unsigned char* buf, int64_t size, const OpFormat& fmt,
                    const ImportOptions<Row>& opts) {
  const Header h = parse(buf, size, fmt, opts.arg);
  if (opts.verify) verify_checksum(h, buf, opts.arg);
  return h;
}

// An import whose buffer cannot be used as it is (made_by: whether its variant runs here; it is
// not the one asked for, or it does not run) prepares the weights again from the buffer's
// layout. Refused, naming `arg`: without allow_reprepare (ImportOptions), or when this build
// cannot unpack that layout (`unpackable` false; `instead` ends that message).
void check_can_prepare_again(const Header& h, const std::string& arg, bool allow_reprepare,
                             bool made_by, bool unpackable, const std::string& instead);

// Prepares the weights an imported layout holds (prepare() returns them): an InvalidArgument
// of prepare's (weights it refuses) names the buffer, `arg`.
template <class Prepare>
auto prepare_again(const std::string& arg, Prepare prepare) -> decltype(prepare()) {
  try {
    return prepare();
  } catch (const InvalidArgument& e) {
    throw_arg(arg, std::string("the prepared layout holds invalid weights (") + e.what() + ")");
  }
}

}  // namespace cpukern::blob
