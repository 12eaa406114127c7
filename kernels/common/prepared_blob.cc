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

template <size_t N>
bool terminated(const char (&field)[N]) {
  return std::memchr(field, 0, N) != nullptr;
}

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full,
                   kP3 = 0x165667B19E3779F9ull;
inline uint64_t round(uint64_t acc, uint64_t v) { return rotl(acc + v * kP2, 31) * kP1; }

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
  h.checksum = checksum(buf + h.header_bytes, h.total_bytes - h.header_bytes);
  std::memcpy(buf, &h, sizeof h);
}

uint64_t checksum(const unsigned char* p, uint64_t n) {
  uint64_t a[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; ++l) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * l, 8);
      a[l] = round(a[l], v);
    }
  uint64_t h = rotl(a[0], 1) + rotl(a[1], 7) + rotl(a[2], 12) + rotl(a[3], 18) + n;
  for (; i < n; ++i) h = rotl(h ^ (uint64_t(p[i]) * kP3), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  return h;
}

Header parse(const unsigned char* buf, int64_t size, const char* op, const std::string& arg) {
  check_arg(buf != nullptr || size == 0, arg, "must not be null");
  check_arg(size >= int64_t(sizeof(Header)), arg,
            "expected a prepared-weight buffer (at least " + s(sizeof(Header)) +
                " bytes of header), got " + std::to_string(size) + " bytes");
  check_arg(reinterpret_cast<uintptr_t>(buf) % kAlign == 0, arg,
            "must start on a 64-byte boundary (the kernels read its sections with aligned "
            "loads), got an address that is " +
                s(reinterpret_cast<uintptr_t>(buf) % kAlign) +
                " bytes past one; copy it into a 64-byte aligned array (cpukern.ternary.aligned_empty, "
                "or a new torch tensor)");
  Header h;
  std::memcpy(&h, buf, sizeof h);
  check_arg(std::memcmp(h.magic, kMagic, sizeof kMagic) == 0, arg,
            "not a cpukern prepared-weight buffer (bad magic)");
  check_arg(h.version == kVersion, arg,
            "prepared-weight format version " + s(h.version) + " is not supported (this build reads " +
                s(kVersion) + ")");
  check_arg(h.header_bytes == sizeof(Header), arg, "corrupted header (header size " + s(h.header_bytes) + ")");
  check_arg(terminated(h.op) && terminated(h.variant) && terminated(h.ukernel) &&
                terminated(h.layout) && terminated(h.format),
            arg, "corrupted header (unterminated name)");
  check_arg(get_name(h.op) == op, arg,
            std::string("expected prepared weights of ") + op + ", got ones of '" + get_name(h.op) + "'");
  check_arg(h.total_bytes == uint64_t(size), arg,
            "header says " + s(h.total_bytes) + " bytes, the buffer has " + std::to_string(size) +
                " (truncated or padded)");
  check_arg(h.sections <= uint32_t(kMaxSections), arg, "corrupted header (section count)");
  for (uint32_t i = 0; i < h.sections; ++i) {
    const Section& sec = h.section[i];
    if (sec.size == 0) continue;
    uint64_t end;
    const bool ok = sec.offset % kAlign == 0 && sec.offset >= h.header_bytes &&
                    !__builtin_add_overflow(sec.offset, sec.size, &end) && end <= h.total_bytes;
    check_arg(ok, arg, "corrupted header (section " + s(i) + " at " + s(sec.offset) + " + " +
                           s(sec.size) + " bytes is outside the " + s(h.total_bytes) +
                           "-byte buffer or misaligned)");
  }
  return h;
}

void verify_payload(const Header& h, const unsigned char* buf, const std::string& arg) {
  const uint64_t got = checksum(buf + h.header_bytes, h.total_bytes - h.header_bytes);
  check_arg(got == h.checksum, arg,
            "payload checksum mismatch (the prepared bytes were changed or corrupted after "
            "they were written)");
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

}  // namespace cpukern::blob
