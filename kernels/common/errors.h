// Errors raised at the API boundary. The Python extension maps InvalidArgument to
// ValueError, TypeMismatch to TypeError and std::bad_alloc to MemoryError.
#pragma once
#include <stdexcept>
#include <string>

namespace cpukern {

struct InvalidArgument : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
struct TypeMismatch : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Message format everywhere: "<arg>: <what was expected>, got <what was given>".
[[noreturn]] inline void throw_arg(const std::string& arg, const std::string& msg) {
  throw InvalidArgument(arg + ": " + msg);
}
[[noreturn]] inline void throw_type(const std::string& arg, const std::string& msg) {
  throw TypeMismatch(arg + ": " + msg);
}
inline void check_arg(bool ok, const std::string& arg, const std::string& msg) {
  if (!ok) throw_arg(arg, msg);
}

// Multiplies sizes with an overflow check; throws naming `arg` when the product
// exceeds what can be allocated.
inline int64_t checked_mul(int64_t a, int64_t b, const char* arg) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > (int64_t(1) << 46))
    throw_arg(arg, "shape too large to allocate");
  return r;
}

}  // namespace cpukern
