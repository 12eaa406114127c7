// The portable scale epilogue shared by every variant: the only multiplies of the layer,
// O(n) per stage and batch row, applied once per row after the kernels' reductions (O4).
#include "kernels/widely_linear/ukernel.h"

namespace cpukern::widely_linear {

void scale_epilogue(const float* dots, const float* scales, int64_t n, int64_t r0, int64_t r1,
                    bool first, float* y_re, float* y_im, double up) {
  const float* s_ure = scales;
  const float* s_uim = scales + n;
  const float* s_wre = scales + 2 * n;
  const float* s_wim = scales + 3 * n;
  if (up != 1.0) {  // a pre-scaled row: the fp32 products below could overflow
    for (int64_t r = r0; r < r1; ++r) {
      const float* dr = dots + (r - r0) * kNumSub;
      const double ure = s_ure[r], uim = s_uim[r], wre = s_wre[r], wim = s_wim[r];
      const double re = (ure * dr[0] + uim * dr[1] + wre * dr[2] + wim * dr[3]) * up;
      const double im = (uim * dr[4] + ure * dr[5] + wim * dr[6] + wre * dr[7]) * up;
      y_re[r] = first ? float(re) : float(double(y_re[r]) + re);
      y_im[r] = first ? float(im) : float(double(y_im[r]) + im);
    }
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const float* dr = dots + (r - r0) * kNumSub;
    float re = s_ure[r] * dr[0];
    re += s_uim[r] * dr[1];
    re += s_wre[r] * dr[2];
    re += s_wim[r] * dr[3];
    float im = s_uim[r] * dr[4];
    im += s_ure[r] * dr[5];
    im += s_wim[r] * dr[6];
    im += s_wre[r] * dr[7];
    if (first) {
      y_re[r] = re;
      y_im[r] = im;
    } else {
      y_re[r] += re;
      y_im[r] += im;
    }
  }
}

}  // namespace cpukern::widely_linear
