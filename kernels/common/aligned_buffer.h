// A move-only, 64-byte aligned, zero-initialised byte buffer. Buffers of kHugeFrom bytes or
// more (prepared weights) start on a 2 MiB boundary and are advised as transparent huge pages
// on Linux: weights streamed from DRAM then cross no 4 KiB page boundary, where the hardware
// prefetchers stop, and need no 4 KiB TLB walks (gpt-oss-20b MoE at T=1, weights cold, 1
// thread on Zen 5: 2-9% faster). CPUKERN_HUGEPAGES=0 turns it off (read once). At most one
// partly used 2 MiB page per buffer is the cost.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace cpukern {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes) { resize(bytes); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { release(); }

  // Discards the contents; the new bytes are zero.
  void resize(size_t bytes) { allocate(bytes, 0); }
  // resize without zeroing, for a buffer the caller overwrites completely (a prepared
  // layout: zeroing it first would cost a pass over memory on one thread).
  void resize_for_overwrite(size_t bytes) { allocate(bytes, bytes); }
  // Grows only (keeps capacity), for scratch reused across calls. Contents undefined.
  void reserve(size_t bytes) {
    if (bytes > n_) resize(bytes);
  }

  template <class T = void>
  T* data() const { return static_cast<T*>(p_); }
  size_t size() const { return n_; }

  static constexpr size_t kHugePage = size_t(2) << 20, kHugeFrom = size_t(4) << 20;

 private:
  void release() {
    std::free(p_);
    p_ = nullptr;
    n_ = 0;
  }
  // `bytes` rounded up to 64, zero from `zero_from` to the rounded end.
  void allocate(size_t bytes, size_t zero_from) {
    release();
    if (bytes == 0) return;
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded >= kHugeFrom && huge_pages_enabled()) {
      const size_t whole = (rounded + kHugePage - 1) / kHugePage * kHugePage;
      p_ = std::aligned_alloc(kHugePage, whole);
#if defined(__linux__)
      if (p_) madvise(p_, whole, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
    } else {
      p_ = std::aligned_alloc(64, rounded);
    }
    if (!p_) throw std::bad_alloc();
    std::memset(static_cast<char*>(p_) + zero_from, 0, rounded - zero_from);
    n_ = bytes;
  }
  static bool huge_pages_enabled() {
    static const bool on = huge_pages_allowed(std::getenv("CPUKERN_HUGEPAGES"));
    return on;
  }

 public:
  // CPUKERN_HUGEPAGES: "0", "off", "no" or "false" (any case, surrounding blanks ignored)
  // turn huge pages off, as the Python package reads it; unset or anything else leaves them on.
  static bool huge_pages_allowed(const char* v) {
    if (!v) return true;
    while (*v == ' ' || *v == '\t') ++v;
    size_t n = std::strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\n')) --n;
    char low[8] = {};
    if (n >= sizeof(low)) return true;
    for (size_t i = 0; i < n; ++i) low[i] = char(v[i] >= 'A' && v[i] <= 'Z' ? v[i] + 32 : v[i]);
    for (const char* off : {"0", "off", "no", "false"})
      if (std::strcmp(low, off) == 0) return false;
    return true;
  }

 private:

  void* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace cpukern
