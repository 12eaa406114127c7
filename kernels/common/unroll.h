// Fully unrolls the next loop (GCC). Micro-kernels keep per-row accumulator arrays in
// registers only when their row loops are unrolled before scalar replacement; without it
// GCC spills them to the stack every k step.
#pragma once

#define CPUKERN_UNROLL _Pragma("GCC unroll 16")
