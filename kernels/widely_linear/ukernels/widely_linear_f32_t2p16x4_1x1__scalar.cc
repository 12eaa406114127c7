// Reference fused widely-linear micro-kernel: one row at a time, scalar, public layout.
// Each decoded code drives both sub-GEMVs of its plane (O1); the activations of a column
// are shared by all 8 (O2); -x is a source choice (O3); the 8 sums stay in locals until
// written once per row (O4). Every dot product is summed in column order.
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

CPUKERN_WL_FUSED(widely_linear_f32_t2p16x4_1x1__scalar) {
  // Plane p feeds sub-GEMVs kA[p] and kB[p].
  static constexpr int kA[4] = {0, 1, 2, 3}, kB[4] = {5, 4, 7, 6};
  const uint32_t* planes[4];
  for (int p = 0; p < 4; ++p) planes[p] = public_plane(data, d, stage, p);
  for (int64_t r = r0; r < r1; ++r) {
    float acc[kNumSub] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < d.words; ++j) {
      const float* xs[4];
      for (int s = 0; s < 4; ++s) xs[s] = x.src[s] + (j << 4);
      for (int p = 0; p < 4; ++p) {
        const uint32_t w = planes[p][r * d.words + j];
        if (!w) continue;
        const int ka = kA[p], kb = kB[p];
        const int sa = kSubSrc[ka], sb = kSubSrc[kb];
        for (int l = 0; l < 16; ++l) {
          const uint32_t code = (w >> (2 * l)) & 3u;
          if (code == 2u) {
            acc[ka] += xs[sa][l];
            acc[kb] += xs[sb][l];
          } else if (code == 1u) {
            acc[ka] += xs[sa ^ 1][l];
            acc[kb] += xs[sb ^ 1][l];
          }
        }
      }
    }
    for (int k = 0; k < kNumSub; ++k) dots[(r - r0) * kNumSub + k] = acc[k];
  }
}

}  // namespace cpukern::widely_linear
