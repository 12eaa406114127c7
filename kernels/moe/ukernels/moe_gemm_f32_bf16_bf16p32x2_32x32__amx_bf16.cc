// AMX BF16 micro-kernel on bf16 weights: TDPBF16PS, 32 rows x 32 columns (amx_bf16_bf16.h),
// over the avx512_bf16 kernel's packing; calls with few rows per expert (decode) run that
// kernel's vdpbf16ps tile instead (its code and results, unchanged).
#include "kernels/moe/ukernels/amx_bf16_bf16.h"
#include "kernels/moe/ukernels/avx512_bf16_bf16.h"
#include "kernels/moe/ukernels/ukernels.h"

// Compiled natively and, with CPUKERN_SIMDE, against SIMDe and the AMX emulation (the
// simde_amx row).
#if defined(CPUKERN_SIMDE)
#define CPUKERN_UK moe_gemm_f32_bf16_bf16p32x2_32x32__simde_amx_bf16
#else
#define CPUKERN_UK moe_gemm_f32_bf16_bf16p32x2_32x32__amx_bf16
#endif
#define CPUKERN_STR2(x) #x
#define CPUKERN_STR(x) CPUKERN_STR2(x)

namespace cpukern::moe {
namespace {
constexpr Ukernel kTiles = make_ukernel<amx::Bf16Tile>(CPUKERN_STR(CPUKERN_UK), "bf16p32x2");
}  // namespace

const Ukernel CPUKERN_UK = with_tiles(
    make_ukernel<avx512bf16::Tile<avx512bf16::Bf16Src>>(CPUKERN_STR(CPUKERN_UK), "bf16p32x2"),
    &kTiles, amx::kTilesMinRowsPerExpert);

}  // namespace cpukern::moe
