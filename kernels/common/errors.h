// Errors raised at the API boundary. The Python extension maps InvalidArgument to
// ValueError, TypeMismatch to TypeError and std::bad_alloc to MemoryError.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace cpukern {

// What a caller can do about an invalid argument, beyond the message: the Python extension
// names its own API for it (python/ext/module.cc); kernels/ never names Python's.
enum class Remedy {
  kNone,
  kAlignBuffer,  // copy the buffer into 64-byte aligned memory
  kExportAgain,  // serialise the weights again with this build
};

struct InvalidArgument : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
  InvalidArgument(const std::string& what, Remedy r) : std::invalid_argument(what), remedy(r) {}
  Remedy remedy = Remedy::kNone;
};
struct TypeMismatch : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
// Prepared weights whose layout this CPU (or the forced variant) cannot run and that cannot be
// unpacked to prepare again: the caller packs again from the plain weights (a ValueError to
// users; callers tell it from other bad input by its type, never by its text).
struct LayoutNotRunnable : InvalidArgument {
  using InvalidArgument::InvalidArgument;
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
inline void check_arg(bool ok, const std::string& arg, const std::string& msg, Remedy remedy) {
  if (!ok) throw InvalidArgument(arg + ": " + msg, remedy);
}

// Multiplies sizes with an overflow check; throws naming `arg` when the product
// exceeds what can be allocated.
inline int64_t checked_mul(int64_t a, int64_t b, const char* arg) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > (int64_t(1) << 46))
    throw_arg(arg, "shape too large to allocate");
  return r;
}

// Memory an op reads, named after the argument it belongs to.
struct ReadRange {
  const void* p;
  int64_t bytes;
  const char* arg;
};

// An output must share no byte with anything the op reads: an input, or the memory of
// prepared weights (an output inside the buffer a from_buffer view reads would also change
// every later call). Throws naming out_arg.
inline void check_disjoint(const void* out, int64_t out_bytes, const char* out_arg,
                           std::initializer_list<ReadRange> reads) {
  const auto o = reinterpret_cast<uintptr_t>(out);
  for (const ReadRange& r : reads) {
    const auto i = reinterpret_cast<uintptr_t>(r.p);
    if (out && r.p && out_bytes > 0 && r.bytes > 0 && o < i + uint64_t(r.bytes) &&
        i < o + uint64_t(out_bytes))
      throw_arg(out_arg, std::string("expected memory disjoint from the input '") + r.arg +
                             "', got an array that overlaps it");
  }
}

}  // namespace cpukern
