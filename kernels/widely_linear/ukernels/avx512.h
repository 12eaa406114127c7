// Included first by the AVX-512 kernels of this op: the intrinsics, native or (under
// CPUKERN_SIMDE) SIMDe's portable ones.
#pragma once
#include "kernels/common/simd_x86.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

// GCC 12's AVX-512 intrinsics use "undefined" sources that it then warns about.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
