// Ctrl-C for long calls. CPython's own SIGINT handler only sets a flag that C code cannot read
// without the GIL, so a call that runs with the GIL released used to see Ctrl-C only when it
// returned. While a SigintStop is armed, SIGINT goes first to a handler of ours that sets an
// atomic flag and then calls the handler that was installed before (CPython's, or a host
// program's), so the host still sees every signal. The arming thread's parallel_for calls read
// the flag between tasks (StopScope) and throw Interrupted: the caller then raises whatever the
// host raises for SIGINT (Python: KeyboardInterrupt).
#pragma once

#include <optional>

#include "kernels/common/thread_pool.h"

namespace cpukern {

class SigintStop {
 public:
  // Arms when `want` and SIGINT's current handler is a function (not SIG_IGN, SIG_DFL or a
  // one-shot SA_RESETHAND one, whose behaviour stays as it is) and no other SigintStop is
  // armed in the process. Two sigaction calls to arm, one to disarm: meant for calls that
  // run for milliseconds or longer.
  explicit SigintStop(bool want = true);
  // Puts the previous handler back, unless something replaced ours meanwhile (then theirs stays).
  ~SigintStop();
  SigintStop(const SigintStop&) = delete;
  SigintStop& operator=(const SigintStop&) = delete;

  bool armed() const { return scope_.has_value(); }

 private:
  std::optional<StopScope> scope_;
  unsigned epoch_ = 0;  // a forked child disarms in place; a scope from before does not restore
};

}  // namespace cpukern
