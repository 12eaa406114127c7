// Memory for packed weights: every buffer of kArenaFrom bytes or more lies in transparent huge
// pages on Linux, whatever its size. Weights streamed from DRAM then cross no 4 KiB page
// boundary, where the hardware prefetchers stop (Zen 4, one thread, cold: a 2 MiB bf16 GEMV
// 15 -> 30 GB/s, a 1.5 MB ternary one 14 -> 20-23 GB/s).
//
// Buffers under kDedicatedFrom share 2 MiB-aligned chunks of kChunk bytes advised as huge pages
// (a bump allocator: a layer's 0.4-4 MB matrices need no huge page each; what a chunk wastes
// is the rest of its last huge page, about 1 MiB); a chunk is freed when its last buffer is.
// Larger buffers get a 2 MiB-aligned block of their own, its whole 2 MiB pages advised (the
// tail keeps 4 KiB pages: no partly used huge page). Smaller buffers, and every buffer with
// CPUKERN_HUGEPAGES=0, come from aligned_alloc. The cost: a freed buffer's bytes stay resident
// until its chunk's other buffers are freed too.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace cpukern {

// CPUKERN_HUGEPAGES: "0", "off", "no" or "false" (any case, surrounding blanks ignored) turn
// huge pages off, as the Python package reads it; unset or anything else leaves them on.
inline bool huge_pages_allowed(const char* v) {
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
// CPUKERN_HUGEPAGES, read once.
inline bool huge_pages_enabled() {
  static const bool on = huge_pages_allowed(std::getenv("CPUKERN_HUGEPAGES"));
  return on;
}

// The transparent huge page of x86-64 and of 4 KiB-granule AArch64 kernels.
inline constexpr size_t kHugePage = size_t(2) << 20;

// A kHugePage-aligned block of `bytes` rounded up to kHugePage, its first `advised` bytes (a
// multiple of kHugePage) advised as huge pages on Linux; nullptr when out of memory. Freed
// with std::free. Shared by WeightMemory and AlignedBuffer's large scratch.
void* huge_page_block(size_t bytes, size_t advised) noexcept;

struct WeightMemory {
  static constexpr size_t kChunk = size_t(64) << 20;
  static constexpr size_t kArenaFrom = size_t(64) << 10;
  static constexpr size_t kDedicatedFrom = kChunk / 4;
  static constexpr size_t kAlign = 4096;  // inside a chunk (64 bytes elsewhere)

  // At least `bytes` bytes (uninitialised), 64-byte aligned; throws std::bad_alloc.
  static void* allocate(size_t bytes);
  // p from allocate, or nullptr.
  static void release(void* p) noexcept;

  struct Stats {
    size_t chunks = 0;        // shared chunks and dedicated blocks held
    size_t chunk_bytes = 0;   // their bytes
    size_t live = 0;          // buffers in them not yet released
  };
  static Stats stats();
};

}  // namespace cpukern
