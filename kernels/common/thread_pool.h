// A persistent thread pool for row-parallel kernels. No thread is created per call.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>

namespace cpukern {

// Default thread count for calls that pass threads <= 0; n <= 0 restores "all cores".
void set_num_threads(int n);
int get_num_threads();

// Runs task(i) for every i in [0, num_tasks) on up to `threads` threads (<= 0: the default)
// and returns when all are done. The calling thread takes part. Between calls the helpers
// poll for the next one for CPUKERN_SPIN_US microseconds (default 200; 0: sleep at once),
// then sleep (a decode step makes hundreds of 50-300 us calls; a sleeping helper wakes
// late). Tasks are pulled from an atomic counter, so a task must not depend on which thread
// runs it; results are then identical for any thread count. Calls from several threads at
// once are safe: a call that finds the pool busy runs its tasks on its own thread. An
// exception thrown by a task is rethrown here after all tasks have stopped. With a StopScope
// alive on the calling thread, the call may instead end early by throwing Interrupted (below).
void parallel_for(int64_t num_tasks, int threads, const std::function<void(int64_t)>& task);

// Polling on (the default) or off; returns the previous setting. The torch layer turns it off
// while torch's own OpenMP threads, which poll as well, share the cores.
bool set_polling(bool on);

// CPUKERN_SPIN_US's value: blanks around decimal digits, capped at 100000; unset or anything
// else gives the default, 200.
int64_t spin_us_from_env(const char* v);

// Thrown by parallel_for when the calling thread's stop flag was set while tasks were left:
// the tasks in flight finished, the others never ran (the call's output is incomplete).
struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("cpukern: interrupted") {}
};

// While alive, every parallel_for called on this thread reads *flag (one relaxed atomic load)
// before it starts each task, on every thread that runs the tasks; once it reads true, no new
// task starts and the call throws Interrupted. Scopes nest (the innermost flag is read).
// Calls made on other threads are not affected.
class StopScope {
 public:
  explicit StopScope(const std::atomic<bool>* flag);
  ~StopScope();
  StopScope(const StopScope&) = delete;
  StopScope& operator=(const StopScope&) = delete;

 private:
  const std::atomic<bool>* outer_;
};

}  // namespace cpukern
