// Portable scalar int8 (W8A8) micro-kernel, the oracle of the int8 tiles: "qd8" = int8
// activations quantised per token at run time (dynamic), "qc8w" = int8 weights with one scale
// per output channel, stored [column][scale, k int8] (a panel is one column, a k step one k).
// Each C element: the exact int32 sum, then float(double(acc) * sa * sw) (gemm_loop.h, int8
// tiles).
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {
namespace {

struct Tile : Int8TileDefaults {
  // Four columns per call: four independent integer sums over the same A row.
  static constexpr int kMR = 1, kNR = 1, kKR = 1, kNP = 4, kActW = 4;
  using A = int8_t;
  static int64_t a_stride(int64_t k) { return k; }
  static int64_t rows(int64_t) { return 1; }
  static int w_at(int, int) { return 0; }
  template <int M>
  static void tile(const int8_t* a, int64_t, int64_t k, const int8_t* w, int64_t panel, int np,
                   int32_t* acc, int64_t) {
    for (int j = 0; j < np; ++j) {
      const int8_t* wj = w + j * panel;
      int32_t s = 0;
      for (int64_t q = 0; q < k; ++q) s += int32_t(a[q]) * int32_t(wj[q]);
      acc[j] = s;
    }
  }
};

}  // namespace

const Ukernel moe_gemm_f32_qd8_qc8w_1x1__scalar =
    make_ukernel<Tile>("moe_gemm_f32_qd8_qc8w_1x1__scalar", "qc8w");

}  // namespace cpukern::moe
