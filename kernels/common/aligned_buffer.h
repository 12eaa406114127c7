// A move-only, 64-byte aligned, zero-initialised byte buffer. AlignedBuffer (scratch): buffers
// of kHugeFrom bytes or more start on a 2 MiB boundary and are advised as transparent huge pages
// on Linux (no 4 KiB page boundary, where the hardware prefetchers stop, in a large stream).
// WeightBuffer (packed weights): from WeightMemory, huge pages for every size from 64 KiB
// (weight_memory.h). CPUKERN_HUGEPAGES=0 turns both off (read once).
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "kernels/common/weight_memory.h"

namespace cpukern {

template <bool kWeights>
class BasicAlignedBuffer {
 public:
  BasicAlignedBuffer() = default;
  explicit BasicAlignedBuffer(size_t bytes) { resize(bytes); }
  BasicAlignedBuffer(BasicAlignedBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  BasicAlignedBuffer& operator=(BasicAlignedBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  BasicAlignedBuffer(const BasicAlignedBuffer&) = delete;
  BasicAlignedBuffer& operator=(const BasicAlignedBuffer&) = delete;
  ~BasicAlignedBuffer() { release(); }

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

  static constexpr size_t kHugeFrom = size_t(4) << 20;

 private:
  void release() {
    if constexpr (kWeights)
      WeightMemory::release(p_);
    else
      std::free(p_);
    p_ = nullptr;
    n_ = 0;
  }
  // `bytes` rounded up to 64, zero from `zero_from` to the rounded end.
  void allocate(size_t bytes, size_t zero_from) {
    release();
    if (bytes == 0) return;
    const size_t rounded = (bytes + 63) / 64 * 64;
    if constexpr (kWeights) {
      p_ = WeightMemory::allocate(rounded);
    } else if (rounded >= kHugeFrom && huge_pages_enabled()) {
      const size_t whole = (rounded + kHugePage - 1) / kHugePage * kHugePage;
      p_ = huge_page_block(whole, whole);
    } else {
      p_ = std::aligned_alloc(64, rounded);
    }
    if (!p_) throw std::bad_alloc();
    std::memset(static_cast<char*>(p_) + zero_from, 0, rounded - zero_from);
    n_ = bytes;
  }

  void* p_ = nullptr;
  size_t n_ = 0;
};

using AlignedBuffer = BasicAlignedBuffer<false>;
using WeightBuffer = BasicAlignedBuffer<true>;

}  // namespace cpukern
