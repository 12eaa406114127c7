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

struct Tile : TileDefaults {
  // Four columns per call for instruction-level parallelism; each sum stays sequential in k.
  static constexpr int kMR = 1, kNR = 1, kKR = 1, kNP = 4, kAStep = 1, kActW = 4;
  using A = float;
  static int64_t a_stride(int64_t k) { return k; }
  static int64_t rows(int64_t) { return 1; }
  static constexpr auto pack = moe::pack;
  static constexpr auto pack_a = pack_a_f32<1>;
  template <int M>
  static void tile(const float* a, int64_t, int64_t k, const bf16_t* w, int64_t, int np,
                   float* c, int64_t, bool accumulate, int64_t) {
    if (np == 4) return columns<4>(a, k, w, c, accumulate);
    for (int j = 0; j < np; ++j) columns<1>(a, k, w + j * k, c + j, accumulate);
  }
  template <int N>
  static void columns(const float* a, int64_t k, const bf16_t* w, float* c, bool accumulate) {
    float s[N] = {};
    for (int64_t q = 0; q < k; ++q)
      for (int j = 0; j < N; ++j) s[j] += a[q] * bf16_to_f32(w[j * k + q]);
    for (int j = 0; j < N; ++j) c[j] = accumulate ? c[j] + s[j] : s[j];
  }
};

}  // namespace

const Ukernel moe_gemm_f32_f32_bf16_1x1__scalar =
    make_ukernel<Tile>("moe_gemm_f32_f32_bf16_1x1__scalar", "bf16");

}  // namespace cpukern::moe
