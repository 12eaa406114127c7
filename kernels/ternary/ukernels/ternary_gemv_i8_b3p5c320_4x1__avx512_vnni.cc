// int8 ternary GEMV, b3p5c320 layout, 4-row tiles, AVX-512BW + VNNI (vpdpbusd zmm at batch
// 1). Compiled natively and, with CPUKERN_SIMDE, against SIMDe.
#if defined(CPUKERN_SIMDE)
#define B3P5_NAME ternary_gemv_i8_b3p5c320_4x1__simde_avx512_vnni
#define B3P5_NAME_STR "ternary_gemv_i8_b3p5c320_4x1__simde_avx512_vnni"
#else
#define B3P5_NAME ternary_gemv_i8_b3p5c320_4x1__avx512_vnni
#define B3P5_NAME_STR "ternary_gemv_i8_b3p5c320_4x1__avx512_vnni"
#endif
#define B3P5_BITS 512
#define B3P5_VNNI 1
#include "kernels/ternary/ukernels/b3p5_impl.h"
