// A persistent thread pool for row-parallel kernels. No thread is created per call.
#pragma once
#include <cstdint>
#include <functional>

namespace cpukern {

// Default thread count for calls that pass threads <= 0; n <= 0 restores "all cores".
void set_num_threads(int n);
int get_num_threads();

// Runs task(i) for every i in [0, num_tasks) on up to `threads` threads (<= 0: the default)
// and returns when all are done. The calling thread takes part. Tasks are pulled from an
// atomic counter, so a task must not depend on which thread runs it; results are then
// identical for any thread count. Calls from several threads at once are safe: a call
// that finds the pool busy runs its tasks on its own thread. An exception thrown by a
// task is rethrown here after all tasks have stopped.
void parallel_for(int64_t num_tasks, int threads, const std::function<void(int64_t)>& task);

}  // namespace cpukern
