// Scratch memory kept between calls, bounded, and given back on request.
//
// A kernel's per-thread scratch (ThreadScratch) is leased for the length of one use (a call,
// or one task on a pool thread). When the lease ends, a thread keeps at most kScratchKeepBytes;
// a larger footprint is released at once. empty_cache() releases the scratch of every thread
// that no call is using now, and marks the busy ones to release theirs when their lease ends.
// Large buffers are private anonymous mappings (ScratchBuffer), so that a release gives the
// pages back to the OS at once instead of leaving them in a malloc arena.
#pragma once
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

namespace cpukern {

// What one thread keeps between calls (all its scratch together).
inline constexpr size_t kScratchKeepBytes = size_t(16) << 20;

// A 64-byte aligned buffer that only grows until released. Bytes it gains are zero (like
// AlignedBuffer); what a reserve keeps is left as it was.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { release(); }

  void reserve(size_t bytes) {
    if (bytes <= n_) return;
    release();
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    if (rounded >= kMapBytes) {
      void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      p_ = p;
      mapped_ = true;
    } else {
      p_ = std::aligned_alloc(64, rounded);
      if (!p_) throw std::bad_alloc();
      std::memset(p_, 0, rounded);  // new bytes are zero either way, as AlignedBuffer's
      mapped_ = false;
    }
    n_ = rounded;
  }
  void release() {
    if (!p_) return;
    if (mapped_)
      ::munmap(p_, n_);
    else
      std::free(p_);
    p_ = nullptr;
    n_ = 0;
  }
  template <class T = void>
  T* data() const { return static_cast<T*>(p_); }
  size_t capacity() const { return n_; }

 private:
  static constexpr size_t kMapBytes = size_t(256) << 10;
  void* p_ = nullptr;
  size_t n_ = 0;
  bool mapped_ = false;
};

// Bytes a std::vector holds; shrink_vector gives them back.
template <class T>
size_t vector_bytes(const std::vector<T>& v) { return v.capacity() * sizeof(T); }
template <class T>
void shrink_vector(std::vector<T>& v) { std::vector<T>().swap(v); }

// Base of one thread's scratch (a thread_local object): registered while it lives.
class ThreadScratch {
 public:
  ThreadScratch() {
    std::lock_guard<std::mutex> g(list_mu());
    list().push_back(this);
  }
  virtual ~ThreadScratch() {
    std::lock_guard<std::mutex> g(list_mu());
    auto& l = list();
    l.erase(std::remove(l.begin(), l.end(), this), l.end());
  }
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;

  virtual size_t bytes() const = 0;  // what it holds now
  virtual void release() = 0;        // gives all of it back

  // Held while the scratch is in use; at the end, more than kScratchKeepBytes (or a pending
  // empty_cache) releases it.
  class Lease {
   public:
    explicit Lease(ThreadScratch& s) : s_(s) { s_.mu_.lock(); }
    ~Lease() {
      if (s_.drop_.exchange(false) || s_.bytes() > kScratchKeepBytes) s_.release();
      s_.mu_.unlock();
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

   private:
    ThreadScratch& s_;
  };

  // Releases every idle thread's scratch now and marks the busy ones; then asks malloc to
  // return its free memory to the OS.
  static void empty_all() {
    {
      std::lock_guard<std::mutex> g(list_mu());
      for (ThreadScratch* s : list()) {
        if (s->mu_.try_lock()) {
          s->release();
          s->drop_.store(false);
          s->mu_.unlock();
        } else {
          s->drop_.store(true);
        }
      }
    }
    ::malloc_trim(0);
  }

 private:
  // Never destroyed: thread_local scratch may unregister during static destruction. Held
  // across fork() (pthread_atfork), so that a child never inherits it locked by a thread it
  // does not have (its new pool threads register here).
  static std::mutex& list_mu() {
    static std::mutex* m = [] {
      auto* mu = new std::mutex;
      pthread_atfork([] { list_mu().lock(); }, [] { list_mu().unlock(); },
                     [] { list_mu().unlock(); });
      return mu;
    }();
    return *m;
  }
  static std::vector<ThreadScratch*>& list() {
    static auto* l = new std::vector<ThreadScratch*>;
    return *l;
  }

  std::mutex mu_;
  std::atomic<bool> drop_{false};
};

// cpukern.empty_cache(): every kernel's scratch kept between calls.
inline void empty_cache() { ThreadScratch::empty_all(); }

}  // namespace cpukern
