// Reference fused widely-linear micro-kernel: one row at a time, scalar, public layout.
// Each decoded code drives both sub-GEMVs of its plane (O1) for every batch row of the
// call; the activations of a column are shared by all 8 (O2); -x is a source choice (O3);
// the 8 sums per batch row stay in locals until written once per row (O4). Every dot
// product is summed in column order.
#include "kernels/common/ternary_codes.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

void widely_linear_f32_f32_t2p16x4_1x1__scalar(const Call& c) {
  const char* row = static_cast<const char*>(c.loc.w);
  for (int64_t i = 0; i < c.rows; ++i, row += c.loc.tile_stride) {
    const uint32_t* planes[4];
    const char* p = row;
    for (int q = 0; q < 4; ++q, p += c.loc.plane_stride)
      planes[q] = reinterpret_cast<const uint32_t*>(p);
    float acc[kMaxBatch][kNumSub] = {};
    for (int64_t j = 0, col = 0; j < c.loc.inner; ++j, col += 16) {
      for (int q = 0; q < 4; ++q) {
        const uint32_t w = planes[q][j];
        if (!w) continue;
        const int ka = kPlaneSubA[q], kb = kPlaneSubB[q];
        const int sa = kSubSrc[ka], sb = kSubSrc[kb];
        for (int l = 0; l < 16; ++l) {
          const int v = ternary_codes::decode(w, l);
          if (!v) continue;
          const int flip = v < 0;  // the negated source
          for (int b = 0; b < c.nb; ++b) {
            acc[b][ka] += c.x[b].src[sa ^ flip][col + l];
            acc[b][kb] += c.x[b].src[sb ^ flip][col + l];
          }
        }
      }
    }
    for (int b = 0; b < c.nb; ++b)
      for (int k = 0; k < kNumSub; ++k) c.dots[b][(i << 3) + k] = acc[b][k];
  }
}

}  // namespace cpukern::widely_linear
