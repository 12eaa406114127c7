// Releases the GIL around kernel calls, safely at interpreter exit, and lets long calls stop
// early on Ctrl-C.
//
// When the interpreter finalises, CPython ends any daemon thread that tries to take the GIL
// back with pthread_exit. Its forced unwind aborts the process ("terminate called without an
// active exception") when it reaches a noexcept destructor such as nb::gil_scoped_release's,
// or nanobind's catch(...). Such a thread is parked here instead: the process is exiting, and
// the thread must never run Python again.
//
// The other way a binding's thread can meet the exit is Python code run from inside the
// binding (bytecode may drop and retake the GIL), with nanobind's argument casters on the
// stack: their arrays are released during the forced unwind, which takes the GIL again inside
// a noexcept function (std::terminate). So no binding runs Python code: arrays arrive as numpy
// arrays or DLPack capsules (cpukern._arrays.native; Tensor.__dlpack__ is Python), the SIGINT
// check below asks CPython in C, and methods that call Python (to_bytes, __reduce__) are
// defined in Python (cpukern._arrays.method_of).
#pragma once
#include <Python.h>
#include <cxxabi.h>
#include <unistd.h>

#include "python/ext/sigint.h"

namespace cpukern::ext {

inline void restore_gil(PyThreadState* state) {
  try {
    PyEval_RestoreThread(state);
  } catch (abi::__forced_unwind&) {
    for (;;) pause();
  }
}

// Runs f() with the GIL held, from a thread that may not hold it (a deleter that releases a
// Python reference). A thread that CPython is finalising is parked in PyGILState_Ensure instead
// of unwinding out of a noexcept frame (the process is exiting; f does not run).
template <class F>
void with_gil(F&& f) {
  PyGILState_STATE state;
  try {
    state = PyGILState_Ensure();
  } catch (abi::__forced_unwind&) {
    for (;;) pause();
  }
  f();
  PyGILState_Release(state);
}

// Calls with at least this much work (multiply-adds or weights touched: 0.25 ms or more even
// for the fastest kernel, ~3e11 weights/s batched) are stoppable. Arming costs three sigaction
// calls and a call of signal.getsignal, about 2 us here: too much for shorter calls, which
// need no early stop. tests/python/test_interrupt.py sizes its calls by this number.
inline constexpr int64_t kStoppableWork = int64_t(1) << 26;

// True (GIL held) on the interpreter's main thread while SIGINT's Python handler is
// signal.default_int_handler: only then does a SIGINT mean KeyboardInterrupt in this call.
// Custom handlers (which may not raise) run after the call, which completes; SIG_IGN stays.
bool sigint_raises_here();

class GilRelease {
 public:
  GilRelease() : GilRelease(0.0) {}
  // With work >= kStoppableWork on the main thread, a Ctrl-C during the call makes its
  // parallel_for loops start no new task and throw Interrupted, which the module's exception
  // translator turns into the KeyboardInterrupt of Python's handler (module.cc).
  explicit GilRelease(double work)
      : sigint_(work >= double(kStoppableWork) && sigint_raises_here()), state_(PyEval_SaveThread()) {}
  ~GilRelease() { restore_gil(state_); }  // then sigint_ disarms, with the GIL held
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  SigintStop sigint_;
  PyThreadState* state_;
};

}  // namespace cpukern::ext
