// Stopping long calls early: StopScope (a flag parallel_for reads between tasks) and
// SigintStop (SIGINT sets that flag and still reaches the handler installed before it).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "python/ext/sigint.h"
#include "kernels/common/thread_pool.h"

namespace cpukern {
namespace {

constexpr int64_t kTasks = 400;

// Runs kTasks tasks; task `trigger` calls `on_trigger` (sets the flag, raises SIGINT...).
// Returns how many tasks ran; sets `interrupted` when parallel_for threw Interrupted.
template <class F>
int64_t run_tasks(int threads, int64_t trigger, F on_trigger, bool& interrupted) {
  std::atomic<int64_t> ran{0};
  interrupted = false;
  try {
    parallel_for(kTasks, threads, [&](int64_t i) {
      if (i == trigger) on_trigger();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      ran++;
    });
  } catch (const Interrupted&) {
    interrupted = true;
  }
  return ran.load();
}

TEST(StopScope, NoTaskStartsAfterTheFlagIsSet) {
  for (int threads : {1, 2, 3}) {
    std::atomic<bool> flag{false};
    StopScope scope(&flag);
    bool interrupted;
    const int64_t ran = run_tasks(threads, 10, [&] { flag = true; }, interrupted);
    EXPECT_TRUE(interrupted) << "threads=" << threads;
    // The tasks in flight when the flag was set finish (at most one per thread), no others.
    EXPECT_GE(ran, 11) << "threads=" << threads;
    EXPECT_LE(ran, 10 + 2 * threads) << "threads=" << threads;
    // The pool works afterwards, and a clear flag runs everything.
    flag = false;
    EXPECT_EQ(run_tasks(threads, -1, [] {}, interrupted), kTasks);
    EXPECT_FALSE(interrupted);
  }
}

TEST(StopScope, OnlyTheScopesThreadIsStopped) {
  std::atomic<bool> flag{true};
  StopScope scope(&flag);
  std::atomic<int64_t> other_ran{0};
  std::thread other([&] { parallel_for(100, 2, [&](int64_t) { other_ran++; }); });
  other.join();
  EXPECT_EQ(other_ran.load(), 100);
  bool interrupted;
  EXPECT_EQ(run_tasks(2, -1, [] {}, interrupted), 0);
  EXPECT_TRUE(interrupted);
}

TEST(StopScope, ScopesNestAndRestore) {
  std::atomic<bool> set{true}, clear{false};
  bool interrupted;
  {
    StopScope outer(&set);
    {
      StopScope inner(&clear);
      EXPECT_EQ(run_tasks(2, -1, [] {}, interrupted), kTasks);
    }
    run_tasks(2, -1, [] {}, interrupted);
    EXPECT_TRUE(interrupted);
  }
  EXPECT_EQ(run_tasks(2, -1, [] {}, interrupted), kTasks);  // no scope: never stopped
}

// Stands in for CPython's handler: counts the signals it is passed.
std::atomic<int> g_host_calls{0};
void host_handler(int) { g_host_calls++; }

struct sigaction set_sigint(void (*handler)(int)) {
  struct sigaction a = {}, old;
  a.sa_handler = handler;
  sigemptyset(&a.sa_mask);
  a.sa_flags = SA_ONSTACK;
  sigaction(SIGINT, &a, &old);
  return old;
}

void (*current_sigint())(int) {
  struct sigaction cur;
  sigaction(SIGINT, nullptr, &cur);
  return cur.sa_handler;
}

class SigintStopTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = set_sigint(host_handler); g_host_calls = 0; }
  void TearDown() override { sigaction(SIGINT, &saved_, nullptr); }
  struct sigaction saved_;
};

TEST_F(SigintStopTest, SigintStopsTheCallAndReachesTheHostHandler) {
  for (int threads : {1, 2, 3}) {
    g_host_calls = 0;
    bool interrupted;
    int64_t ran;
    {
      SigintStop stop;
      ASSERT_TRUE(stop.armed());
      ran = run_tasks(threads, 10, [] { raise(SIGINT); }, interrupted);
    }
    EXPECT_TRUE(interrupted) << "threads=" << threads;
    EXPECT_LE(ran, 10 + 2 * threads) << "threads=" << threads;
    EXPECT_EQ(g_host_calls.load(), 1) << "threads=" << threads;
    EXPECT_EQ(current_sigint(), host_handler) << "the host's handler is back";
  }
  // Disarmed: a SIGINT reaches the host only and stops nothing.
  bool interrupted;
  EXPECT_EQ(run_tasks(2, 10, [] { raise(SIGINT); }, interrupted), kTasks);
  EXPECT_FALSE(interrupted);
  EXPECT_EQ(g_host_calls.load(), 2);
}

TEST_F(SigintStopTest, IgnoredOrDefaultSigintIsLeftAlone) {
  set_sigint(SIG_IGN);
  {
    SigintStop stop;
    EXPECT_FALSE(stop.armed());
    bool interrupted;
    EXPECT_EQ(run_tasks(2, 10, [] { raise(SIGINT); }, interrupted), kTasks);  // still ignored
    EXPECT_FALSE(interrupted);
  }
  EXPECT_EQ(current_sigint(), SIG_IGN);
  set_sigint(SIG_DFL);
  {
    SigintStop stop;
    EXPECT_FALSE(stop.armed());  // SIGINT still ends the process, as the host chose
  }
  EXPECT_EQ(current_sigint(), SIG_DFL);
}

TEST_F(SigintStopTest, OneArmedAtATimeAndNotWhenUnwanted) {
  SigintStop off(false);
  EXPECT_FALSE(off.armed());
  SigintStop first;
  EXPECT_TRUE(first.armed());
  SigintStop second;
  EXPECT_FALSE(second.armed());  // would chain to our own handler
}

void other_handler(int) {}

TEST_F(SigintStopTest, AHandlerInstalledWhileArmedStays) {
  {
    SigintStop stop;
    ASSERT_TRUE(stop.armed());
    set_sigint(other_handler);
  }
  EXPECT_EQ(current_sigint(), other_handler);
  SigintStop again;
  EXPECT_TRUE(again.armed());
}

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif

// A child forked while armed (from another thread: the arming one is inside its call) has no
// call in flight: it gets the previous handler back and can arm on its own.
TEST_F(SigintStopTest, ForkedChildDisarms) {
  if (std::getenv("CPUKERN_QEMU_CPU"))
    GTEST_SKIP() << "qemu-user 7.2 aborts in the forked child of a multi-threaded guest; "
                    "tested on the host leg";
  if (kTsan) GTEST_SKIP() << "ThreadSanitizer cannot start threads after a multi-threaded fork";
  SigintStop stop;
  ASSERT_TRUE(stop.armed());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    bool ok = current_sigint() == host_handler;
    SigintStop child;
    ok = ok && child.armed();
    bool interrupted;
    g_host_calls = 0;
    const int64_t ran = run_tasks(2, 10, [] { raise(SIGINT); }, interrupted);
    ok = ok && interrupted && ran < kTasks && g_host_calls == 1;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace cpukern
