#include "python/ext/sigint.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>

namespace cpukern {
namespace {

std::atomic<bool> g_interrupted{false};  // set by on_sigint, read between tasks
std::atomic<bool> g_armed{false};        // one SigintStop armed per process
std::atomic<unsigned> g_epoch{0};        // bumped when a forked child disarms
struct sigaction g_prev;                 // written before ours is installed, read by on_sigint

void on_sigint(int sig, siginfo_t* info, void* context) {
  g_interrupted.store(true, std::memory_order_relaxed);
  if (g_prev.sa_flags & SA_SIGINFO)
    g_prev.sa_sigaction(sig, info, context);
  else
    g_prev.sa_handler(sig);  // a function: arming refuses SIG_IGN and SIG_DFL
}

bool is_ours(const struct sigaction& a) {
  return (a.sa_flags & SA_SIGINFO) && a.sa_sigaction == on_sigint;
}

bool is_function(const struct sigaction& a) {
  if (a.sa_flags & SA_SIGINFO) return a.sa_sigaction != nullptr;
  return a.sa_handler != SIG_IGN && a.sa_handler != SIG_DFL;
}

// A forked child has no call in flight: it puts the previous handler back (sigaction is
// async-signal-safe) so that the next arming there does not chain to our own handler.
void disarm_in_child() {
  if (!g_armed.load()) return;
  struct sigaction cur;
  if (sigaction(SIGINT, nullptr, &cur) == 0 && is_ours(cur)) sigaction(SIGINT, &g_prev, nullptr);
  g_epoch.fetch_add(1);
  g_armed.store(false);
}

}  // namespace

SigintStop::SigintStop(bool want) {
  if (!want) return;
  static const int registered = pthread_atfork(nullptr, nullptr, disarm_in_child);
  (void)registered;
  bool expected = false;
  if (!g_armed.compare_exchange_strong(expected, true)) return;
  struct sigaction cur;
  if (sigaction(SIGINT, nullptr, &cur) != 0 || !is_function(cur) || is_ours(cur) ||
      (cur.sa_flags & SA_RESETHAND)) {
    g_armed.store(false);
    return;
  }
  g_prev = cur;
  struct sigaction mine = cur;  // the previous mask and flags (CPython: SA_ONSTACK)
  mine.sa_flags |= SA_SIGINFO;
  mine.sa_sigaction = on_sigint;
  g_interrupted.store(false);
  struct sigaction replaced;
  if (sigaction(SIGINT, &mine, &replaced) != 0) {
    g_armed.store(false);
    return;
  }
  epoch_ = g_epoch.load();
  scope_.emplace(&g_interrupted);
}

SigintStop::~SigintStop() {
  if (!scope_) return;
  scope_.reset();
  if (epoch_ != g_epoch.load()) return;  // forked since: the child already disarmed
  struct sigaction cur;
  if (sigaction(SIGINT, &g_prev, &cur) == 0 && !is_ours(cur))
    sigaction(SIGINT, &cur, nullptr);  // replaced while armed: theirs stays
  g_armed.store(false);
}

}  // namespace cpukern
