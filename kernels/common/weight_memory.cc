#include "kernels/common/weight_memory.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace cpukern {

namespace {

// A 2 MiB-aligned block: a shared chunk (buffers bumped from `used`) or one buffer's own.
struct Block {
  size_t size = 0;
  size_t used = 0;
  size_t live = 0;
};

struct Arena {
  std::mutex mu;
  std::map<uintptr_t, Block> blocks;  // by start address
  uintptr_t current = 0;              // the chunk new buffers are bumped from (0: none)
};

Arena& arena() {
  static Arena* a = new Arena;  // never destroyed: weights may outlive static destructors
  return *a;
}

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// A block of its own for `size` bytes, its whole huge pages advised.
uintptr_t new_block(size_t size) {
  void* p = huge_page_block(size, size / kHugePage * kHugePage);
  if (!p) throw std::bad_alloc();
  return reinterpret_cast<uintptr_t>(p);
}

}  // namespace

void* huge_page_block(size_t bytes, size_t advised) noexcept {
  void* p = std::aligned_alloc(kHugePage, round_up(bytes, kHugePage));
#if defined(__linux__)
  if (p && advised) madvise(p, advised, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
  return p;
}

void* WeightMemory::allocate(size_t bytes) {
  bytes = round_up(bytes ? bytes : 1, 64);
  if (bytes < kArenaFrom || !huge_pages_enabled()) {
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  if (bytes >= kDedicatedFrom) {
    const uintptr_t p = new_block(bytes);
    a.blocks[p] = Block{bytes, bytes, 1};
    return reinterpret_cast<void*>(p);
  }
  const size_t need = round_up(bytes, kAlign);
  Block* cur = a.current ? &a.blocks.at(a.current) : nullptr;
  if (!cur || cur->size - cur->used < need) {
    // The old chunk's tail stays unused; the chunk is freed with its last buffer (release).
    const uintptr_t p = new_block(kChunk);
    cur = &(a.blocks[p] = Block{kChunk, 0, 0});
    a.current = p;
  }
  void* p = reinterpret_cast<void*>(a.current + cur->used);
  cur->used += need;
  ++cur->live;
  return p;
}

void WeightMemory::release(void* ptr) noexcept {
  if (!ptr) return;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  Arena& a = arena();
  {
    std::lock_guard<std::mutex> lock(a.mu);
    auto it = a.blocks.upper_bound(p);
    if (it != a.blocks.begin()) {
      --it;
      if (p < it->first + it->second.size) {
        if (--it->second.live == 0) {  // no memory kept for later buffers
          if (it->first == a.current) a.current = 0;
          std::free(reinterpret_cast<void*>(it->first));
          a.blocks.erase(it);
        }
        return;
      }
    }
  }
  std::free(ptr);  // from aligned_alloc (small, or huge pages off)
}

WeightMemory::Stats WeightMemory::stats() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  Stats s;
  for (const auto& [start, b] : a.blocks) {
    ++s.chunks;
    s.chunk_bytes += b.size;
    s.live += b.live;
  }
  return s;
}

}  // namespace cpukern
