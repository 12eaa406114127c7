// The limits every op shares, in one table. The Python extension exports them (_ext.limits)
// so the Python layer never restates a number.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/common/errors.h"

namespace cpukern::limits {

// Largest dimension or element count of any array: index arithmetic stays far from int64
// overflow below it (checked_mul in errors.h uses the same bound).
inline constexpr int64_t kMaxElements = int64_t(1) << 46;
// Largest explicit threads= argument. The pool runs at most kMaxPoolThreads threads; a larger
// request splits the work as if it had that many (results do not depend on it).
inline constexpr int kMaxThreads = 4096;
inline constexpr int kMaxPoolThreads = 256;

// One thread semantics for every op: 0 = the default (set_num_threads, else all cores),
// 1..kMaxThreads = that many. Returns the count to use; throws naming `arg` otherwise.
int resolve_threads(int threads, const char* arg = "threads");

}  // namespace cpukern::limits
