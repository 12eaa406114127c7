// fp32 ternary GEMV, lut3r8 layout, 8-row tiles, AVX2 + BMI2: the packer splits each
// public word into its add/subtract masks with pext; the inner loop is the lut3r8 one.
#define LUT3_NAME ternary_gemv_f32_lut3r8_8x1__avx2_bmi2
#define LUT3_USE_PEXT 1
#define ternary_gemv_f32_lut3r8_8x1__avx2_bmi2_str "ternary_gemv_f32_lut3r8_8x1__avx2_bmi2"
#include "kernels/ternary/ukernels/lut3r8_avx2_impl.h"
