#include "kernels/common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>

#include "kernels/common/cpu_features.h"
#include "kernels/common/limits.h"

namespace cpukern {
namespace {

constexpr int kMaxThreads = limits::kMaxPoolThreads;

// The stop flag of the innermost StopScope on this thread (nullptr: none).
thread_local const std::atomic<bool>* t_stop = nullptr;

bool stop_requested(const std::atomic<bool>* stop) {
  return stop && stop->load(std::memory_order_relaxed);
}

// How long a helper polls for the next job, and the caller for the helpers, before sleeping
// on a condition variable. A decode step calls the pool hundreds of times for 50-300 us each,
// with a little framework work in between; a helper that went to sleep wakes late (a futex
// wake-up, and on a VM an idle vCPU the hypervisor must reschedule): a 2560x2560 ternary GEMV
// took longer on 2 threads than on 1. CPUKERN_SPIN_US (read once) sets it; 0 never polls.
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds t(spin_us_from_env(std::getenv("CPUKERN_SPIN_US")));
  return t;
}

// Off while another pool polls on the same cores (set_polling): two polling pools take turns
// by the scheduler's time slice.
std::atomic<bool> g_polling{true};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls done() for up to spin_time(); true if it held.
template <typename Done>
bool spin_until(Done done) {
  if (spin_time().count() == 0 || !g_polling.load(std::memory_order_relaxed)) return done();
  const auto end = std::chrono::steady_clock::now() + spin_time();
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 255) == 255 && std::chrono::steady_clock::now() > end) return done();
  }
}

class ThreadPool {
 public:
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(int64_t num_tasks, int threads, const std::function<void(int64_t)>& task) {
    if (num_tasks <= 0) return;
    threads = int(std::min<int64_t>({threads, num_tasks, kMaxThreads}));
    const std::atomic<bool>* stop = t_stop;
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (threads <= 1 || !busy.owns_lock()) {
      for (int64_t i = 0; i < num_tasks; ++i) {
        if (stop_requested(stop)) throw Interrupted();
        task(i);
      }
      return;
    }
    grow(threads - 1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      num_tasks_ = num_tasks;
      next_.store(0);
      stop_flag_ = stop;
      interrupted_.store(false);
      error_ = nullptr;
      helpers_wanted_ = threads - 1;
      helpers_active_ = 0;
      ++generation_;
    }
    cv_.notify_all();
    work();
    {
      std::lock_guard<std::mutex> lock(mu_);
      helpers_wanted_ = 0;  // late wakers do not join a finished job
    }
    spin_until([&] { return helpers_active_.load(std::memory_order_acquire) == 0; });
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return helpers_active_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    if (interrupted_.load()) throw Interrupted();
  }

 private:
  void grow(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    while (int(workers_.size()) < n) workers_.emplace_back([this] { loop(); });
  }

  void work() {
    for (int64_t i; (i = next_.fetch_add(1)) < num_tasks_;) {
      if (stop_requested(stop_flag_)) {  // task i is claimed and skipped: the job is incomplete
        interrupted_.store(true);
        return;
      }
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        next_.store(num_tasks_);
      }
    }
  }

  void loop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (!stop_ && generation_ == seen) {  // poll for the next job, then sleep
        lock.unlock();
        spin_until([&] {
          return generation_.load(std::memory_order_relaxed) != seen ||
                 stop_.load(std::memory_order_relaxed);
        });
        lock.lock();
      }
      cv_.wait(lock, [&] { return stop_ || (generation_ != seen && helpers_wanted_ > 0); });
      if (stop_) return;
      seen = generation_;
      --helpers_wanted_;
      ++helpers_active_;
      lock.unlock();
      work();
      lock.lock();
      if (--helpers_active_ == 0) done_cv_.notify_all();
    }
  }

  std::mutex busy_;  // one parallel job at a time; other callers run inline
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_{0};
  const std::atomic<bool>* stop_flag_ = nullptr;  // the caller's stop flag, read before each task
  std::atomic<bool> interrupted_{false};
  std::exception_ptr error_;
  // Written under mu_; atomic so that a polling thread may read them without it.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> helpers_active_{0};
  std::atomic<bool> stop_{false};
  int helpers_wanted_ = 0;
};

// The pool of this process. A forked child has none of the parent's workers, and the
// parent's mutexes may have been held at the fork: the child drops (leaks) the inherited pool
// and builds a fresh one on first use, as OpenMP runtimes do. Never destroyed: workers may
// outlive static destruction.
std::atomic<ThreadPool*> g_pool{nullptr};
std::mutex g_pool_mu;  // held across fork() so the child never inherits it locked

void lock_before_fork() { g_pool_mu.lock(); }
void unlock_after_fork() { g_pool_mu.unlock(); }
void reset_in_child() {
  g_pool.store(nullptr);
  g_pool_mu.unlock();
}

ThreadPool& pool() {
  static const int registered = pthread_atfork(lock_before_fork, unlock_after_fork, reset_in_child);
  (void)registered;
  ThreadPool* p = g_pool.load(std::memory_order_acquire);
  if (p) return *p;
  std::lock_guard<std::mutex> lock(g_pool_mu);
  p = g_pool.load(std::memory_order_relaxed);
  if (!p) {
    p = new ThreadPool();
    g_pool.store(p, std::memory_order_release);
  }
  return *p;
}

std::atomic<int> g_default_threads{0};

}  // namespace

bool set_polling(bool on) { return g_polling.exchange(on, std::memory_order_relaxed); }

void set_num_threads(int n) { g_default_threads.store(n > 0 ? std::min(n, kMaxThreads) : 0); }

int get_num_threads() {
  const int n = g_default_threads.load();
  return n > 0 ? n : cpu_info().num_cores;
}

StopScope::StopScope(const std::atomic<bool>* flag) : outer_(t_stop) { t_stop = flag; }
StopScope::~StopScope() { t_stop = outer_; }

void parallel_for(int64_t num_tasks, int threads, const std::function<void(int64_t)>& task) {
  pool().run(num_tasks, threads > 0 ? threads : get_num_threads(), task);
}

int64_t spin_us_from_env(const char* v) {
  constexpr int64_t kDefault = 200, kMax = 100000;
  if (!v) return kDefault;
  while (*v == ' ' || *v == '\t' || *v == '\n') ++v;
  int64_t us = 0;
  const char* d = v;
  for (; *d >= '0' && *d <= '9'; ++d) us = std::min(kMax, us * 10 + (*d - '0'));
  const char* end = d;
  while (*end == ' ' || *end == '\t' || *end == '\n') ++end;
  return d == v || *end ? kDefault : us;
}

int limits::resolve_threads(int threads, const char* arg) {
  check_arg(threads >= 0 && threads <= limits::kMaxThreads, arg,
            "expected 0 (the default) or 1.." + std::to_string(limits::kMaxThreads) + ", got " +
                std::to_string(threads));
  return threads > 0 ? threads : get_num_threads();
}

}  // namespace cpukern
