// int8 ternary GEMV, b3p5c320 layout, 4-row tiles, AVX-512BW (vpmaddubsw zmm). Compiled
// natively and, with CPUKERN_SIMDE, against SIMDe.
#if defined(CPUKERN_SIMDE)
#define B3P5_NAME ternary_gemv_i8_b3p5c320_4x1__simde_avx512
#define B3P5_NAME_STR "ternary_gemv_i8_b3p5c320_4x1__simde_avx512"
#else
#define B3P5_NAME ternary_gemv_i8_b3p5c320_4x1__avx512
#define B3P5_NAME_STR "ternary_gemv_i8_b3p5c320_4x1__avx512"
#endif
#define B3P5_BITS 512
#include "kernels/ternary/ukernels/b3p5_impl.h"
