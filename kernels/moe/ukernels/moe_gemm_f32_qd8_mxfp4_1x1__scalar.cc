// Portable scalar W4A8 micro-kernel, the oracle of the W4A8 tiles (w4a8_loop.h): "qd8" = int8
// activations quantised per token at run time, "mxfp4" = the MXFP4 codes as they come, one
// column per panel (nibble = the block's k order, low nibble first). Per element and block:
// the exact int32 sum of qa * w2, then one fmaf with the block multiplier.
#include <cmath>

#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernels/ukernels.h"
#include "kernels/moe/w4a8_loop.h"

namespace cpukern::moe {
namespace {

struct Tile : W4a8TileDefaults {
  static constexpr int kMR = 1, kNR = 1, kNP = 4, kActW = 4;
  static int64_t rows(int64_t) { return 1; }
  static int nibble(int, int kk) { return kk; }
  template <int M>
  static void tile(const int8_t* a, int64_t, const int32_t* corr, int64_t, int64_t nb,
                   const uint8_t* rel, const uint8_t* codes, int64_t panel, int np, float* acc,
                   int64_t) {
    for (int j = 0; j < np; ++j) {
      const uint8_t* cj = codes + j * panel;
      float s = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = corr[b];
        for (int kk = 0; kk < mxfp4::kBlock; ++kk) {
          const int code = (cj[b * mxfp4::kBlockBytes + kk / 2] >> (4 * (kk & 1))) & 0xf;
          isum += int32_t(a[b * mxfp4::kBlock + kk]) * mxfp4::kTwice[code];
        }
        s = std::fma(float(isum), w4a8_mult(rel[j * panel + b]), s);
      }
      acc[j] = s;
    }
  }
};

}  // namespace

const Ukernel moe_gemm_f32_qd8_mxfp4_1x1__scalar =
    make_w4a8_ukernel<Tile>("moe_gemm_f32_qd8_mxfp4_1x1__scalar", "mxfp4a8");

}  // namespace cpukern::moe
