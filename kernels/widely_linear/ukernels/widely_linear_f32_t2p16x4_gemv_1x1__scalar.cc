// Reference single sub-GEMV (the naive schedule): one plane times one source, scalar,
// summed in column order exactly like the fused reference kernel.
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

CPUKERN_WL_GEMV(widely_linear_f32_t2p16x4_gemv_1x1__scalar) {
  const uint32_t* plane = public_plane(data, d, stage, kSubPlane[k]);
  const float* pos = x.src[kSubSrc[k]];
  const float* neg = x.src[kSubSrc[k] ^ 1];
  for (int64_t r = r0; r < r1; ++r) {
    float acc = 0;
    for (int64_t j = 0; j < d.words; ++j) {
      const uint32_t w = plane[r * d.words + j];
      if (!w) continue;
      for (int l = 0; l < 16; ++l) {
        const uint32_t code = (w >> (2 * l)) & 3u;
        if (code == 2u) acc += pos[(j << 4) + l];
        else if (code == 1u) acc += neg[(j << 4) + l];
      }
    }
    dots[(r - r0) * kNumSub + k] = acc;
  }
}

}  // namespace cpukern::widely_linear
