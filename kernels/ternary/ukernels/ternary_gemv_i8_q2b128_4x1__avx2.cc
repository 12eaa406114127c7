// int8 ternary GEMV, q2b128 layout, 4-row tiles, AVX2 (vpmaddubsw).
#define Q2B_NAME ternary_gemv_i8_q2b128_4x1__avx2
#define Q2B_NAME_STR "ternary_gemv_i8_q2b128_4x1__avx2"
#define Q2B_BITS 256
#include "kernels/ternary/ukernels/q2b_impl.h"
