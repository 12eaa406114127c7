// Helpers for the per-op kernel lists (kernels/<op>/ukernels/ukernels.inc).
//
// A kernel list is an X-macro file: one line per row, the op's micro-kernel catalogue.
//   CPUKERN_VARIANT(arch, name, isa, priority, ...)         a shipped variant: a registry row,
//       listed by cpukern.kernels(), chosen by default when it has the highest priority this
//       CPU runs;
//   CPUKERN_CATALOGUE_ONLY(arch, name, isa, priority, ...)  the same columns, for a row that
//       wins on no CPU we know of: a row of the registry's catalogue, forced by name only,
//       never listed or chosen by default (priority unused).
// Each consumer expands it its own way: declarations (ukernels.h), the registry and its
// catalogue (op_registry.inc and list_rows.inc over the op's kernel_rows.h), the tests' rows
// (tests/cc/common/list_rows.inc: every line, apart from the registry). A consumer that treats
// both kinds alike defines CPUKERN_CATALOGUE_ONLY as CPUKERN_VARIANT.
// The first argument says where the row exists:
//   any    every build (portable code)
//   x86    x86-64 builds        arm   AArch64 builds
//   simde  the SIMDe test build of AVX-512 sources (any host; tests only, never the registry)
// CPUKERN_ON(arch, ...) keeps `...` where that arch applies to the current file, so one list
// expands into declarations, registry rows and test rows without #if around each line.
// Files compiled for SIMDe (-DCPUKERN_SIMDE=1) see only the simde rows.
#pragma once

#define CPUKERN_ON(arch, ...) CPUKERN_ON_##arch(__VA_ARGS__)

#if defined(CPUKERN_SIMDE)
#define CPUKERN_ON_any(...)
#define CPUKERN_ON_x86(...)
#define CPUKERN_ON_arm(...)
#define CPUKERN_ON_simde(...) __VA_ARGS__
#else
#define CPUKERN_ON_any(...) __VA_ARGS__
#define CPUKERN_ON_simde(...)
#if defined(__x86_64__)
#define CPUKERN_ON_x86(...) __VA_ARGS__
#else
#define CPUKERN_ON_x86(...)
#endif
#if defined(__aarch64__)
#define CPUKERN_ON_arm(...) __VA_ARGS__
#else
#define CPUKERN_ON_arm(...)
#endif
#endif

// Declarations want every symbol the build can have, SIMDe ones included (their library is
// linked only into tests; an unused declaration costs nothing).
#if defined(__x86_64__)
#define CPUKERN_DECLARE_x86(...) __VA_ARGS__
#else
#define CPUKERN_DECLARE_x86(...)
#endif
#if defined(__aarch64__)
#define CPUKERN_DECLARE_arm(...) __VA_ARGS__
#else
#define CPUKERN_DECLARE_arm(...)
#endif
#define CPUKERN_DECLARE_any(...) __VA_ARGS__
#define CPUKERN_DECLARE_simde(...) __VA_ARGS__
#define CPUKERN_DECLARE(arch, ...) CPUKERN_DECLARE_##arch(__VA_ARGS__)

// A micro-kernel's symbol from its name stem and ISA: stem__isa, or stem__simde_isa in a
// file compiled against SIMDe (-DCPUKERN_SIMDE). CPUKERN_UKERNEL_NAME is the same as a
// string (the Ukernel's name member).
#if defined(CPUKERN_SIMDE)
#define CPUKERN_UKERNEL(stem, isa) stem##__simde_##isa
#else
#define CPUKERN_UKERNEL(stem, isa) stem##__##isa
#endif
#define CPUKERN_UKERNEL_NAME(stem, isa) CPUKERN_STRINGIFY(CPUKERN_UKERNEL(stem, isa))
#define CPUKERN_STRINGIFY(x) CPUKERN_STRINGIFY_(x)
#define CPUKERN_STRINGIFY_(x) #x
// A micro-kernel's exported helper function (stem__isa_fn), e.g. an fp32 ternary kernel's
// _run and _xprep, which the no-multiply check finds by name.
#define CPUKERN_UKERNEL_FN(stem, isa, fn) CPUKERN_UKERNEL(stem, isa##_##fn)
