// Releases the GIL around kernel calls, safely at interpreter exit.
//
// When the interpreter finalises, CPython ends any daemon thread that tries to take the GIL
// back with pthread_exit. Its forced unwind aborts the process ("terminate called without an
// active exception") when it reaches a noexcept destructor such as nb::gil_scoped_release's,
// or nanobind's catch(...). Such a thread is parked here instead: the process is exiting, and
// the thread must never run Python again.
#pragma once
#include <Python.h>
#include <cxxabi.h>
#include <unistd.h>

namespace cpukern::ext {

inline void restore_gil(PyThreadState* state) {
  try {
    PyEval_RestoreThread(state);
  } catch (abi::__forced_unwind&) {
    for (;;) pause();
  }
}

class GilRelease {
 public:
  GilRelease() : state_(PyEval_SaveThread()) {}
  ~GilRelease() { restore_gil(state_); }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace cpukern::ext
