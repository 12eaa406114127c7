// Portable scalar micro-kernel, the oracle: weights kept as nn.Linear [o][i] bf16 (a panel is
// one output column, a k step one k), A widened to fp32 rows, every C element one sequential
// fp32 sum over k (multiply, then add).
#include <cstring>

#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/pack_kpairs.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {
namespace {

void pack(const bf16_t* w, int64_t o, int64_t i, void* dst) {
  std::memcpy(dst, w, size_t(o * i) * 2);
}

struct Bf16Columns {
  using W = bf16_t;
  static constexpr int kKR = 1, kStepW = 1;
  static float value(const bf16_t* step, int) { return bf16_to_f32(*step); }
};

struct Tile : ScalarColumnsTile<Bf16Columns> {
  static constexpr auto pack = moe::pack;
};

}  // namespace

const Ukernel moe_gemm_f32_f32_bf16_1x1__scalar =
    make_ukernel<Tile>("moe_gemm_f32_f32_bf16_1x1__scalar", "bf16");

}  // namespace cpukern::moe
