// int8 ternary GEMV, q2b256 layout, 4-row tiles, AVX-512BW without BMI2 (vpmaddubsw zmm);
// the same source as the avx512_bmi2 row's int8 kernel, compiled with the avx512 flags.
// (Its SIMDe flavour is ternary_gemv_i8_q2b256_4x1__simde_avx512.)
#define Q2B_NAME ternary_gemv_i8_q2b256_4x1__avx512
#define Q2B_NAME_STR "ternary_gemv_i8_q2b256_4x1__avx512"
#define Q2B_BITS 512
#include "kernels/ternary/ukernels/q2b_impl.h"
