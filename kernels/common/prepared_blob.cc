#include "kernels/common/prepared_blob.h"

#include <cstring>

#include "kernels/common/errors.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the header is read in place");

namespace cpukern::blob {
namespace {

std::string s(uint64_t v) { return std::to_string(v); }

template <size_t N>
void set_name(char (&field)[N], const std::string& v, const char* what) {
  if (v.size() >= N) throw_arg(what, "name too long for the prepared-weight header: " + v);
  std::memset(field, 0, N);
  std::memcpy(field, v.data(), v.size());
}

template <size_t N>
std::string get_name(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full,
                   kP3 = 0x165667B19E3779F9ull;
inline uint64_t round(uint64_t acc, uint64_t v) { return rotl(acc + v * kP2, 31) * kP1; }

// The checksum's state: four lanes over 32-byte blocks, then a byte-wise tail. Feeding
// blocks in several calls (the header copy, then the payload) equals one call over their
// concatenation.
struct Lanes {
  uint64_t a[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  void blocks(const unsigned char* p, uint64_t n) {  // n % 32 == 0
    for (uint64_t i = 0; i + 32 <= n; i += 32)
      for (int l = 0; l < 4; ++l) {
        uint64_t v;
        std::memcpy(&v, p + i + 8 * l, 8);
        a[l] = round(a[l], v);
      }
  }
  // The last n % 32 bytes at p, `total` the bytes fed in all.
  uint64_t finish(const unsigned char* p, uint64_t n, uint64_t total) const {
    uint64_t h = rotl(a[0], 1) + rotl(a[1], 7) + rotl(a[2], 12) + rotl(a[3], 18) + total;
    for (uint64_t i = 0; i < n; ++i) h = rotl(h ^ (uint64_t(p[i]) * kP3), 11) * kP1;
    h ^= h >> 33;
    h *= kP2;
    h ^= h >> 29;
    return h;
  }
};
static_assert(sizeof(Header) % 32 == 0, "the header is whole checksum blocks");

// Every byte of a name field after its first NUL is 0 (and there is a NUL).
template <size_t N>
bool clean_name(const char (&field)[N]) {
  const char* nul = static_cast<const char*>(std::memchr(field, 0, N));
  if (!nul) return false;
  for (const char* c = nul; c < field + N; ++c)
    if (*c) return false;
  return true;
}

template <size_t N>
bool all_zero(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < N; ++i)
    if (b[i]) return false;
  return true;
}

}  // namespace

LayoutPlan plan(const int64_t* sizes, int n) {
  LayoutPlan p;
  p.sections = n;
  uint64_t at = sizeof(Header);
  for (int i = 0; i < n; ++i) {
    const uint64_t size = uint64_t(sizes[i]);
    p.section[i] = {size ? at : 0, size};
    at += (size + kAlign - 1) / kAlign * kAlign;
  }
  p.total = at;
  return p;
}

Header make_header(const char* op, const std::string& variant, const std::string& ukernel,
                   const std::string& layout, const std::string& format, const int64_t* dims,
                   int ndims, const LayoutPlan& plan) {
  Header h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.header_bytes = sizeof(Header);
  set_name(h.op, op, "op");
  set_name(h.variant, variant, "variant");
  set_name(h.ukernel, ukernel, "ukernel");
  set_name(h.layout, layout, "layout");
  set_name(h.format, format, "format");
  for (int i = 0; i < ndims; ++i) h.dims[i] = dims[i];
  h.total_bytes = plan.total;
  h.sections = uint32_t(plan.sections);
  for (int i = 0; i < plan.sections; ++i) h.section[i] = plan.section[i];
  return h;
}

void finish(Header h, unsigned char* buf) {
  h.checksum = 0;
  h.checksum = blob_checksum(h, buf);
  std::memcpy(buf, &h, sizeof h);
}

uint64_t checksum(const unsigned char* p, uint64_t n) {
  Lanes l;
  const uint64_t whole = n / 32 * 32;
  l.blocks(p, whole);
  return l.finish(p + whole, n - whole, n);
}

uint64_t blob_checksum(const Header& h, const unsigned char* buf) {
  Header z = h;
  z.checksum = 0;
  Lanes l;
  l.blocks(reinterpret_cast<const unsigned char*>(&z), sizeof z);
  const unsigned char* p = buf + sizeof(Header);
  const uint64_t n = h.total_bytes - sizeof(Header), whole = n / 32 * 32;
  l.blocks(p, whole);
  return l.finish(p + whole, n - whole, sizeof(Header) + n);
}

Header parse(const unsigned char* buf, int64_t size, const OpFormat& fmt, const std::string& arg) {
  check_arg(buf != nullptr || size == 0, arg, "must not be null");
  check_arg(size >= int64_t(sizeof(Header)), arg,
            "expected a prepared-weight buffer (at least " + s(sizeof(Header)) +
                " bytes of header), got " + std::to_string(size) + " bytes");
  check_arg(reinterpret_cast<uintptr_t>(buf) % kAlign == 0, arg,
            "must start on a 64-byte boundary (the kernels read its sections with aligned "
            "loads), got an address that is " +
                s(reinterpret_cast<uintptr_t>(buf) % kAlign) +
                " bytes past one; copy it into 64-byte aligned memory",
            Remedy::kAlignBuffer);
  Header h;
  std::memcpy(&h, buf, sizeof h);
  check_arg(std::memcmp(h.magic, kMagic, sizeof kMagic) == 0, arg,
            "not a cpukern prepared-weight buffer (bad magic)");
  check_arg(h.version != 1, arg,
            "prepared-weight format version 1 is no longer read (its checksum did not cover the "
            "header); this build reads version " + s(kVersion) +
                ": serialise the weights again with this build",
            Remedy::kExportAgain);
  check_arg(h.version == kVersion, arg,
            "prepared-weight format version " + s(h.version) + " is not supported (this build reads " +
                s(kVersion) + ")");
  const std::string bad = "corrupted header (";
  check_arg(h.header_bytes == sizeof(Header), arg, bad + "header size " + s(h.header_bytes) + ")");
  check_arg(clean_name(h.op) && clean_name(h.variant) && clean_name(h.ukernel) &&
                clean_name(h.layout) && clean_name(h.format),
            arg, bad + "a name that is not NUL-terminated and zero-padded)");
  check_arg(get_name(h.op) == fmt.op, arg,
            std::string("expected prepared weights of ") + fmt.op + ", got ones of '" +
                get_name(h.op) + "'");
  check_arg(h.total_bytes == uint64_t(size), arg,
            "header says " + s(h.total_bytes) + " bytes, the buffer has " + std::to_string(size) +
                " (truncated or padded)");
  check_arg(h.reserved == 0 && all_zero<sizeof h.pad>(h.pad), arg, bad + "reserved bytes not 0)");
  for (int i = fmt.dims; i < kMaxDims; ++i)
    check_arg(h.dims[i] == 0, arg, bad + "dim " + s(uint64_t(i)) + " set; " + fmt.op + " has " +
                                       s(uint64_t(fmt.dims)) + ")");
  check_arg(h.sections == uint32_t(fmt.sections), arg,
            bad + s(h.sections) + " sections; " + fmt.op + " writes " + s(uint64_t(fmt.sections)) +
                ")");
  for (int i = fmt.sections; i < kMaxSections; ++i)
    check_arg(h.section[i].offset == 0 && h.section[i].size == 0, arg,
              bad + "unused section entry " + s(uint64_t(i)) + " set)");
  // The sections exactly where plan() puts them: in order, each at the padded end of the one
  // before (the first right after the header), empty ones at offset 0, the buffer ending at
  // the last one's padded end. The specific checks first, for their messages.
  uint64_t at = sizeof(Header);  // where the next non-empty section starts
  for (uint32_t i = 0; i < h.sections; ++i) {
    const Section& sec = h.section[i];
    const std::string which = "section " + s(i) + " at " + s(sec.offset) + " + " + s(sec.size) +
                              " bytes";
    if (sec.size == 0) {
      check_arg(sec.offset == 0, arg, bad + which + ": an empty section has offset 0)");
      continue;
    }
    uint64_t end;
    check_arg(!__builtin_add_overflow(sec.offset, sec.size, &end) && end <= h.total_bytes, arg,
              bad + which + " is outside the " + s(h.total_bytes) + "-byte buffer)");
    check_arg(sec.offset % kAlign == 0, arg, bad + which + " is not 64-byte aligned)");
    check_arg(sec.offset >= h.header_bytes, arg, bad + which + " overlaps the header)");
    check_arg(sec.offset >= at, arg,
              bad + which + " overlaps or precedes the section before it, which ends at " +
                  s(at) + ")");
    check_arg(sec.offset == at, arg,
              bad + which + " leaves a gap after the section before it, which ends at " + s(at) +
                  ")");
    at = end + (kAlign - end % kAlign) % kAlign;  // end <= total_bytes: no overflow
  }
  check_arg(h.total_bytes == at, arg,
            bad + "the buffer ends at " + s(h.total_bytes) +
                ", its last section's padded end is at " + s(at) + ")");
  return h;
}

void verify_checksum(const Header& h, const unsigned char* buf, const std::string& arg) {
  check_arg(blob_checksum(h, buf) == h.checksum, arg,
            "checksum mismatch (the header or payload bytes were changed or corrupted after they "
            "were written)");
}

const unsigned char* section(const Header& h, const unsigned char* buf, int i, int64_t expected,
                             const std::string& arg, const char* what) {
  const uint64_t size = uint32_t(i) < h.sections ? h.section[i].size : 0;
  check_arg(expected >= 0 && size == uint64_t(expected), arg,
            std::string("corrupted header (") + what + ": " + s(size) + " bytes, the shapes need " +
                std::to_string(expected) + ")");
  return size ? buf + h.section[i].offset : nullptr;
}

std::string name(const char (&field)[16]) { return get_name(field); }
std::string name(const char (&field)[32]) { return get_name(field); }
std::string name(const char (&field)[96]) { return get_name(field); }

void check_can_prepare_again(const Header& h, const std::string& arg, bool allow_reprepare,
                             bool made_by, bool unpackable, const std::string& instead) {
  const std::string what = "prepared for variant '" + name(h.variant) + "' (layout '" +
                           name(h.layout) + "'), " +
                           (made_by ? "not the variant asked for" : "which this CPU cannot run");
  check_arg(allow_reprepare, arg,
            "was " + what + "; import it once with from_buffer, which prepares it again for this CPU");
  if (!unpackable)
    throw LayoutNotRunnable(arg + ": " + what + ", and that layout cannot be unpacked; " + instead);
}

}  // namespace cpukern::blob
