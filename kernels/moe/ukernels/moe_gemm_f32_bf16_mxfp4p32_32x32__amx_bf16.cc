// AMX BF16 micro-kernel on MXFP4 weights (the avx512_bf16 kernel's mxfp4p32 packing): calls
// that run tiles decode each (panel, K block) to bf16 pair words in L1 (gemm_loop.h
// decoded_gemm) and run the bf16 tile of amx_bf16_bf16.h over them, so results equal the
// amx bf16 kernel's on the dequantized weights for every call; calls with few rows per expert
// run the avx512_bf16 MXFP4 kernel, as the bf16 kernel runs the avx512_bf16 one.
#include "kernels/moe/ukernels/amx_bf16_bf16.h"
#include "kernels/moe/ukernels/avx512_bf16_mxfp4.h"
#include "kernels/moe/ukernels/ukernels.h"

#if defined(CPUKERN_SIMDE)
#define CPUKERN_UK moe_gemm_f32_bf16_mxfp4p32_32x32__simde_amx_bf16
#else
#define CPUKERN_UK moe_gemm_f32_bf16_mxfp4p32_32x32__amx_bf16
#endif
#define CPUKERN_STR2(x) #x
#define CPUKERN_STR(x) CPUKERN_STR2(x)

namespace cpukern::moe {
namespace {
// The MXFP4 blocks decoded for the AMX tile at every row count (A packed for the tile).
struct Mxfp4Tiles : avx512bf16::Mxfp4Tile {
  using Decoded = amx::Bf16Tile;
  static constexpr int kMR = Decoded::kMR, kARows = Decoded::kARows;
  static constexpr bool kDecodeAlways = true;
  static int64_t a_stride(int64_t k) { return Decoded::a_stride(k); }
  static constexpr auto pack_a = Decoded::pack_a;
};
constexpr Ukernel kTiles = make_ukernel<Mxfp4Tiles>(CPUKERN_STR(CPUKERN_UK), "mxfp4p32");
}  // namespace

const Ukernel CPUKERN_UK = with_tiles(
    make_ukernel<avx512bf16::Mxfp4Tile>(CPUKERN_STR(CPUKERN_UK), "mxfp4p32"), &kTiles,
    amx::kTilesMinRowsPerExpert);

}  // namespace cpukern::moe
