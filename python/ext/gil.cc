#include "python/ext/gil.h"

#include <csignal>
#include <exception>

#include <nanobind/nanobind.h>

namespace nb = nanobind;

namespace cpukern::ext {

bool sigint_raises_here() {
  // Looked up once and kept (never destroyed: the interpreter may be gone at static
  // destruction). Plain pointer, no static guard: a guard held while an import releases the
  // GIL could deadlock with another thread waiting on it; a lost race leaks one Refs.
  struct Refs {
    nb::object main_thread, getsignal, default_handler;
  };
  static Refs* refs = nullptr;
  try {
    if (!refs) {
      nb::module_ signal = nb::module_::import_("signal");
      refs = new Refs{nb::module_::import_("threading").attr("main_thread"),
                      signal.attr("getsignal"), signal.attr("default_int_handler")};
    }
    // threading.main_thread() follows os.fork (the forking thread is the child's main one).
    if (nb::cast<unsigned long>(refs->main_thread().attr("ident")) != PyThread_get_thread_ident())
      return false;
    return refs->getsignal(int(SIGINT)).is(refs->default_handler);
  } catch (const std::exception&) {  // nb::python_error, nb::cast_error
    return false;                     // not stoppable; the call itself goes on
  }
}

}  // namespace cpukern::ext
