// int8 ternary GEMV, b3p5c160 layout (1.6 bits/weight), 4-row tiles, AVX2 (vpmaddubsw).
#define B3P5_NAME ternary_gemv_i8_b3p5c160_4x1__avx2
#define B3P5_NAME_STR "ternary_gemv_i8_b3p5c160_4x1__avx2"
#define B3P5_BITS 256
#include "kernels/ternary/ukernels/b3p5_impl.h"
