#include "python/ext/gil.h"

#include <csignal>
#include <exception>

#include <nanobind/nanobind.h>

namespace nb = nanobind;

#if PY_VERSION_HEX >= 0x030D0000
// Still exported, declared only in CPython's internal headers since 3.13.
extern "C" int _PyOS_IsMainThread(void);
#endif

namespace cpukern::ext {

bool sigint_raises_here() {
  // Only the main thread can get KeyboardInterrupt. Asked of CPython in C, never by calling
  // Python code (threading.main_thread() is Python): a daemon thread running Python code from
  // inside a binding could be ended there by interpreter exit, and the forced unwind through
  // the binding's frames (nanobind's argument casters release arrays, which takes the GIL
  // again) would abort the process. _PyOS_IsMainThread follows os.fork like
  // threading.main_thread() (the forking thread is the child's main one).
  if (!_PyOS_IsMainThread()) return false;
  // Looked up once and kept (never destroyed: the interpreter may be gone at static
  // destruction). Plain pointer, no static guard: a guard held while an import releases the
  // GIL could deadlock with another thread waiting on it; a lost race leaks one Refs.
  struct Refs {
    nb::object getsignal, default_handler;
  };
  static Refs* refs = nullptr;
  try {
    if (!refs) {
      nb::module_ signal = nb::module_::import_("signal");
      refs = new Refs{signal.attr("getsignal"), signal.attr("default_int_handler")};
    }
    // signal.getsignal is C: no Python code runs here either.
    return refs->getsignal(int(SIGINT)).is(refs->default_handler);
  } catch (const std::exception&) {  // nb::python_error, nb::cast_error
    return false;                     // not stoppable; the call itself goes on
  }
}

}  // namespace cpukern::ext
