// AMX INT8 micro-kernel on int8 (W8A8) weights: TDPBSSD, 32 rows x 32 columns (amx_int8.h),
// over the VNNI kernel's qc8wp16x4 packing; calls with few rows per expert run the AVX-512
// VNNI tile. Both give exact int32 sums and one epilogue: the same bits either way.
#include "kernels/moe/ukernels/amx_int8.h"
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/ukernels/vnni_int8.h"

#if defined(CPUKERN_SIMDE)
#define CPUKERN_UK moe_gemm_f32_qd8_qc8wp16x4_32x32__simde_amx_int8
#else
#define CPUKERN_UK moe_gemm_f32_qd8_qc8wp16x4_32x32__amx_int8
#endif
#define CPUKERN_STR2(x) #x
#define CPUKERN_STR(x) CPUKERN_STR2(x)

namespace cpukern::moe {
namespace {
constexpr Ukernel kTiles = make_ukernel<amx::Int8Tile>(CPUKERN_STR(CPUKERN_UK), "qc8wp16x4");
}  // namespace

const Ukernel CPUKERN_UK =
    with_tiles(make_ukernel<vnni::Int8Tile<vnni::Zmm>>(CPUKERN_STR(CPUKERN_UK), "qc8wp16x4"),
               &kTiles, amx::kTilesMinRowsPerExpert);

}  // namespace cpukern::moe
