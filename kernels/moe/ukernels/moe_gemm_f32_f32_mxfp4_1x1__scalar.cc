// Portable scalar MXFP4 micro-kernel, the oracle of the MXFP4 tiles: per output column its
// K/32 blocks as stored [scale][16 bytes of e2m1] (17 bytes per 32 weights), each weight
// decoded to its exact fp32 value (mxfp4::value) and summed exactly as the bf16 scalar kernel
// sums the dequantized weights (multiply, then add, sequential in k).
#include <cstring>

#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernels/pack_kpairs.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {
namespace {

constexpr int kStep = 1 + mxfp4::kBlockBytes;

void pack(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t i, void* dst) {
  const int64_t nb = i / mxfp4::kBlock;
  uint8_t* d = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < o * nb; ++r) {
    d[r * kStep] = scales[r];
    std::memcpy(d + r * kStep + 1, blocks + r * mxfp4::kBlockBytes, mxfp4::kBlockBytes);
  }
}

// A column's k step is one 32-k block, [scale][16 bytes of e2m1].
struct Mxfp4Columns {
  using W = uint8_t;
  static constexpr int kKR = mxfp4::kBlock, kStepW = kStep;
  static float value(const uint8_t* step, int q) {
    return mxfp4::value(mxfp4::code_at(step + 1, q), step[0]);
  }
};

struct Tile : ScalarColumnsTile<Mxfp4Columns> {
  static constexpr WeightFormat kFormat = WeightFormat::kMxfp4;
  static constexpr auto pack_mxfp4 = moe::pack;
};

}  // namespace

const Ukernel moe_gemm_f32_f32_mxfp4_1x1__scalar =
    make_ukernel<Tile>("moe_gemm_f32_f32_mxfp4_1x1__scalar", "mxfp4");

}  // namespace cpukern::moe
