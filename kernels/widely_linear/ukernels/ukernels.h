// Declarations of the widely-linear micro-kernels, one per file in this directory.
// Names: <op>_<out>_<layout>_<MR>x<NR>__<isa>; "t2p16x4" = the public 2-bit layout
// (16 weights per uint32) of the 4 planes, "g3r8x4" / "g4r16x4" = R-row lanes and G-column
// lookups (lookup_layout.h), "gemv" = the single sub-GEMV of the naive schedule.
#pragma once
#include "kernels/widely_linear/ukernel.h"

#define CPUKERN_WL_FUSED(fn) void fn(const Call& c)
#define CPUKERN_WL_GEMV(fn) void fn(const Call& c)

namespace cpukern::widely_linear {

// Lookup layouts (portable size, pack without BMI2, locate and activation table:
// lookup_layout.cc).
namespace g3r8 {
size_t packed_size(const Dims& d);
void pack(const uint32_t* planes, const Dims& d, void* out);
void pack_bmi2(const uint32_t* planes, const Dims& d, void* out);  // x86 avx2_bmi2 library
Loc locate(const void* data, const Dims& d, int64_t stage, int plane, int64_t r0);
int64_t table_floats(const Dims& d);
void build_table(const Acts& x, const Dims& d, float* table);
int64_t table_floats_batch(const Dims& d);
void build_table_batch(const Acts* x, int nb, const Dims& d, float* table);
}  // namespace g3r8
namespace g4r16 {
size_t packed_size(const Dims& d);
void pack(const uint32_t* planes, const Dims& d, void* out);
Loc locate(const void* data, const Dims& d, int64_t stage, int plane, int64_t r0);
int64_t table_floats(const Dims& d);
void build_table(const Acts& x, const Dims& d, float* table);
int64_t table_floats_batch(const Dims& d);
void build_table_batch(const Acts* x, int nb, const Dims& d, float* table);
}  // namespace g4r16

CPUKERN_WL_FUSED(widely_linear_f32_t2p16x4_1x1__scalar);
CPUKERN_WL_GEMV(widely_linear_f32_t2p16x4_gemv_1x1__scalar);

#if defined(__x86_64__)
CPUKERN_WL_FUSED(widely_linear_f32_g3r8x4_8x1__avx2);
CPUKERN_WL_GEMV(widely_linear_f32_g3r8x4_gemv_8x1__avx2);
CPUKERN_WL_FUSED(widely_linear_f32_g3r8x4_signed_1x8__avx2);
CPUKERN_WL_FUSED(widely_linear_f32_g3r8x4_8x1__avx2_bmi2);
CPUKERN_WL_GEMV(widely_linear_f32_g3r8x4_gemv_8x1__avx2_bmi2);
CPUKERN_WL_FUSED(widely_linear_f32_g3r8x4_signed_1x8__avx2_bmi2);
CPUKERN_WL_FUSED(widely_linear_f32_g4r16x4_16x1__avx512);
CPUKERN_WL_GEMV(widely_linear_f32_g4r16x4_gemv_16x1__avx512);
CPUKERN_WL_FUSED(widely_linear_f32_g4r16x4_signed_1x8__avx512);
CPUKERN_WL_FUSED(widely_linear_f32_t2p16x4_1x1__avx512_bmi2);
CPUKERN_WL_GEMV(widely_linear_f32_t2p16x4_gemv_4x1__avx512_bmi2);
#endif

// The AVX-512 sources compiled against SIMDe (library :ukernels_simde, tests only).
CPUKERN_WL_FUSED(widely_linear_f32_g4r16x4_16x1__simde_avx512);
CPUKERN_WL_GEMV(widely_linear_f32_g4r16x4_gemv_16x1__simde_avx512);
CPUKERN_WL_FUSED(widely_linear_f32_g4r16x4_signed_1x8__simde_avx512);
CPUKERN_WL_FUSED(widely_linear_f32_t2p16x4_1x1__simde_avx512);
CPUKERN_WL_GEMV(widely_linear_f32_t2p16x4_gemv_4x1__simde_avx512);

}  // namespace cpukern::widely_linear
