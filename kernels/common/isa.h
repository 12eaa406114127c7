// The ISA table: the named feature sets that micro-kernel libraries are compiled for.
// Each key here is also a key of ISA_COPTS in toolchains/defs.bzl (the compile flags of that
// set), and a registry row that runs code of library isa="k" requires exactly isa::k, so a
// variant never runs code compiled for features it did not ask for. tests/static/
// check_isa_table.py keeps the two tables equal.
#pragma once
#include <cstdint>

#include "kernels/common/cpu_features.h"

namespace cpukern::isa {

inline constexpr uint64_t portable = 0;
// x86-64
inline constexpr uint64_t avx2 = kAVX2 | kFMA;
inline constexpr uint64_t avx2_bmi2 = avx2 | kBMI2 | kFastPext;
inline constexpr uint64_t avx_vnni = avx2 | kAVXVNNI;
inline constexpr uint64_t avx512f = kAVX512F;
inline constexpr uint64_t avx512 = kAVX512F | kAVX512BW | kAVX512VL | kFMA;
inline constexpr uint64_t avx512_bmi2 = avx512 | kBMI2 | kFastPext;
inline constexpr uint64_t avx512_vnni = avx512 | kAVX512VNNI;
inline constexpr uint64_t avx512_bf16 = avx512 | kAVX512BF16 | kAVX512VNNI;  // VNNI: on every BF16 CPU
// AMX tiles next to the avx512_bf16 tiles (its library holds both: small calls use the latter).
inline constexpr uint64_t amx = avx512_bf16 | kAMXTile | kAMXBF16 | kAMXINT8;
// AArch64 (NEON is baseline armv8-a)
inline constexpr uint64_t neon = kNEON;
inline constexpr uint64_t neon_dotprod = kNEON | kDotProd;
// neon_bf16 also requires I8MM: its library holds the MoE SMMLA int8 tile. Armv8.6-A makes
// BF16 and I8MM mandatory together and every BF16 core ships both (Neoverse V1/N2/V2, Cortex-
// A510/A710+, Graviton3/4, Grace), so no real CPU loses the bf16 rows; one row set, not two.
inline constexpr uint64_t neon_bf16 = kNEON | kBF16 | kI8MM;
inline constexpr uint64_t neon_i8mm = kNEON | kDotProd | kI8MM;

}  // namespace cpukern::isa
