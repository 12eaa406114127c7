// Declarations of every ternary GEMV micro-kernel (one definition per file in this folder).
#pragma once
#include "kernels/ternary/ukernel.h"

namespace cpukern::ternary {

// Portable.
extern const F32Ukernel ternary_gemv_f32_t2p16_1x1__scalar;
extern const I8Ukernel ternary_gemv_i8_t2p16_1x1__scalar;

#if defined(__x86_64__) || defined(CPUKERN_SIMDE)
// AVX2 (no BMI2).
extern const F32Ukernel ternary_gemv_f32_lut3r8_8x1__avx2;
extern const I8Ukernel ternary_gemv_i8_q2b128_4x1__avx2;
// AVX2 + BMI2 (fast pext).
extern const F32Ukernel ternary_gemv_f32_lut3r8_8x1__avx2_bmi2;
extern const I8Ukernel ternary_gemv_i8_q2b128_4x1__avx2_bmi2;
// AVX-512 (F, BW, VL) + BMI2 (fast pext), native build.
extern const F32Ukernel ternary_gemv_f32_t2p16r16_16x1__avx512_bmi2;
extern const I8Ukernel ternary_gemv_i8_q2b256_4x1__avx512_bmi2;
// AVX-512 (F, BW, VL), no BMI2: the lut27r16 vpermt2ps table-lookup kernel.
extern const F32Ukernel ternary_gemv_f32_lut27r16_16x1__avx512;
extern const I8Ukernel ternary_gemv_i8_q2b256_4x1__avx512;
// AVX-512 (F, BW, VL) + VNNI, no BMI2.
extern const I8Ukernel ternary_gemv_i8_q2b256_4x1__avx512_vnni;
// The same sources compiled against SIMDe (the :simde library only).
extern const F32Ukernel ternary_gemv_f32_t2p16r16_16x1__simde_avx512;
extern const I8Ukernel ternary_gemv_i8_q2b256_4x1__simde_avx512;
extern const F32Ukernel ternary_gemv_f32_lut27r16_16x1__simde_avx512;
extern const I8Ukernel ternary_gemv_i8_q2b256_4x1__simde_avx512_vnni;
#endif

}  // namespace cpukern::ternary
