// Loop unrolling for micro-kernels (GCC). Micro-kernels keep per-row accumulator arrays in
// registers only when their row loops are unrolled before scalar replacement; without it
// GCC spills them to the stack every k step.
//
// The SIMDe copies (-DCPUKERN_SIMDE, correctness tests on any host) do not unroll: SIMDe's
// portable _mm512_* bodies, unrolled, made GCC 12 take over 10 minutes and 1.5 GB for one
// file (ternary_gemv_f32_qd8_lut27r16_16x1__avx512_vnni.cc: 13 s without). Unrolling changes
// no result, only register allocation.
#pragma once

#define CPUKERN_PRAGMA(x) _Pragma(#x)
#if defined(CPUKERN_SIMDE)
#define CPUKERN_UNROLL_BY(n)
#else
#define CPUKERN_UNROLL_BY(n) CPUKERN_PRAGMA(GCC unroll n)
#endif
// Fully unrolls the next loop (up to 16 iterations).
#define CPUKERN_UNROLL CPUKERN_UNROLL_BY(16)
