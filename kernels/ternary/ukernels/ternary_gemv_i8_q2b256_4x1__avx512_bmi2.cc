// int8 ternary GEMV, q2b256 layout, 4-row tiles, AVX-512BW (vpmaddubsw zmm). Compiled
// natively (avx512_bmi2 flags) and, with CPUKERN_SIMDE, against SIMDe for any host.
#if defined(CPUKERN_SIMDE)
#define Q2B_NAME ternary_gemv_i8_q2b256_4x1__simde_avx512
#define Q2B_NAME_STR "ternary_gemv_i8_q2b256_4x1__simde_avx512"
#else
#define Q2B_NAME ternary_gemv_i8_q2b256_4x1__avx512_bmi2
#define Q2B_NAME_STR "ternary_gemv_i8_q2b256_4x1__avx512_bmi2"
#endif
#define Q2B_BITS 512
#include "kernels/ternary/ukernels/q2b_impl.h"
