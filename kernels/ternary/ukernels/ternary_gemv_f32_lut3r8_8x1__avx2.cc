// fp32 ternary GEMV, lut3r8 layout, 8-row tiles, AVX2 without BMI2 (AMD Zen 1/2: no pext).
#define LUT3_NAME ternary_gemv_f32_lut3r8_8x1__avx2
#define LUT3_USE_PEXT 0
#define ternary_gemv_f32_lut3r8_8x1__avx2_str "ternary_gemv_f32_lut3r8_8x1__avx2"
#include "kernels/ternary/ukernels/lut3r8_avx2_impl.h"
