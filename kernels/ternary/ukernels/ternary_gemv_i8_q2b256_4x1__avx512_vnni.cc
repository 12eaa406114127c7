// int8 ternary GEMV, q2b256 layout, 4-row tiles, AVX-512BW + VNNI (vpdpbusd zmm). Compiled
// natively (avx512_vnni flags, no BMI2) and, with CPUKERN_SIMDE, against SIMDe.
#if defined(CPUKERN_SIMDE)
#define Q2B_NAME ternary_gemv_i8_q2b256_4x1__simde_avx512_vnni
#define Q2B_NAME_STR "ternary_gemv_i8_q2b256_4x1__simde_avx512_vnni"
#else
#define Q2B_NAME ternary_gemv_i8_q2b256_4x1__avx512_vnni
#define Q2B_NAME_STR "ternary_gemv_i8_q2b256_4x1__avx512_vnni"
#endif
#define Q2B_BITS 512
#define Q2B_VNNI 1
#include "kernels/ternary/ukernels/q2b_impl.h"
