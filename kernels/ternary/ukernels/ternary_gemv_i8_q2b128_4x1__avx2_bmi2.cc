// int8 ternary GEMV, q2b128 layout, 4-row tiles, AVX2 + BMI2 row (same inner loop as avx2:
// the int8 decode is shift+and, pext does not help it).
#define Q2B_NAME ternary_gemv_i8_q2b128_4x1__avx2_bmi2
#define Q2B_NAME_STR "ternary_gemv_i8_q2b128_4x1__avx2_bmi2"
#define Q2B_BITS 256
#include "kernels/ternary/ukernels/q2b_impl.h"
