// Reference single sub-GEMV (the naive schedule): one plane times one source, scalar,
// summed in column order exactly like the fused reference kernel.
#include "kernels/common/ternary_codes.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

void widely_linear_f32_f32_t2p16x4_gemv_1x1__scalar(const Call& c) {
  const int s = kSubSrc[c.k];
  const char* row = static_cast<const char*>(c.loc.w);
  for (int64_t i = 0; i < c.rows; ++i, row += c.loc.tile_stride) {
    const uint32_t* plane = reinterpret_cast<const uint32_t*>(row);
    float acc[kMaxBatch] = {};
    for (int64_t j = 0, col = 0; j < c.loc.inner; ++j, col += 16) {
      const uint32_t w = plane[j];
      if (!w) continue;
      for (int l = 0; l < 16; ++l) {
        const int v = ternary_codes::decode(w, l);
        if (!v) continue;
        const int flip = v < 0;
        for (int b = 0; b < c.nb; ++b) acc[b] += c.x[b].src[s ^ flip][col + l];
      }
    }
    for (int b = 0; b < c.nb; ++b) c.dots[b][(i << 3) + c.k] = acc[b];
  }
}

}  // namespace cpukern::widely_linear
