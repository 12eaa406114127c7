// The serialised form of a prepared (kernel-layout) weight: one contiguous byte buffer =
// a fixed little-endian header + 64-byte aligned payload sections. Ops (ternary,
// widely_linear, moe) write it from their prepared objects and view it back zero-copy.
//
// Safety contract: parse() validates the header against the buffer's size in O(1) (magic,
// version, every section inside the buffer with overflow-checked arithmetic, 64-byte
// alignment, NUL-terminated names) and throws InvalidArgument naming the caller's argument.
// The op then checks the dims and each section's exact size against what its kernels read,
// so for ANY payload bytes the kernels stay in bounds. The payload checksum is verified only
// when asked (verify_payload): O(bytes), at import time, never per call.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cpukern::blob {

inline constexpr char kMagic[8] = {'C', 'P', 'U', 'K', 'P', 'R', 'E', 'P'};
inline constexpr uint32_t kVersion = 1;
inline constexpr int kMaxSections = 8;
inline constexpr int kMaxDims = 8;
inline constexpr int64_t kAlign = 64;

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
  uint64_t checksum;       // of bytes [header_bytes, total_bytes) (see checksum())
  uint32_t sections;       // used entries of section[]
  uint32_t reserved;
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

// O(1) validation of buf (size bytes) as a blob of `op`; throws naming `arg`. The returned
// header is a copy (the caller's bytes may change afterwards without affecting it).
Header parse(const unsigned char* buf, int64_t size, const char* op, const std::string& arg);
// Throws naming `arg` if the payload's checksum differs from the header's.
void verify_payload(const Header& h, const unsigned char* buf, const std::string& arg);

// Section i of a parsed header: its pointer, after checking its exact expected size.
const unsigned char* section(const Header& h, const unsigned char* buf, int i, int64_t expected,
                             const std::string& arg, const char* what);

// NUL-terminated name fields as strings.
std::string name(const char (&field)[16]);
std::string name(const char (&field)[32]);
std::string name(const char (&field)[96]);

// The rows an import chooses between: made_by, the registry row (or one of `extra`) named by
// the header whose micro-kernel and layout match (same_kernel(row, ukernel, layout)) and that
// this CPU runs, or nullptr; want, the row to use: made_by unless `isa` forces one (a row of
// `extra` by name, else registry.select(isa), which throws naming "isa") or made_by is null.
template <class Row, class Registry, class SameKernel>
std::pair<const Row*, const Row*> import_rows(const Header& h, const Registry& registry,
                                              const std::vector<Row>* extra,
                                              const std::string& isa, SameKernel same_kernel) {
  const std::string variant = name(h.variant), ukernel = name(h.ukernel), layout = name(h.layout);
  const Row* made_by = nullptr;
  auto consider = [&](const Row& r) {
    if (!made_by && variant == r.name && same_kernel(r, ukernel, layout) && r.supported())
      made_by = &r;
  };
  for (const Row& r : registry.variants()) consider(r);
  if (extra)
    for (const Row& r : *extra) consider(r);
  const Row* want = made_by;
  if (!isa.empty() || !made_by) {
    want = nullptr;
    if (extra && !isa.empty())
      for (const Row& r : *extra)
        if (isa == r.name) want = &r;
    if (!want) want = &registry.select(isa);
  }
  return {made_by, want};
}

}  // namespace cpukern::blob
