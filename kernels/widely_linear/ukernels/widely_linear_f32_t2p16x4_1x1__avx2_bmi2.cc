// Fused widely-linear micro-kernel, AVX2 + BMI2 (pext decode, needs a fast pext),
// public layout, one row x one batch row, lanes = 8 columns.
// Per half word:
//   O2: x_re, -x_re, x_im, -x_im loaded once and shared by all 8 sub-GEMVs;
//   O1: each plane word is decoded once (two pext, lane masks from a table) and the
//       selectors drive both its real-output and its imaginary-output accumulation;
//   O3: "-1" lanes select the precomputed negated source, so every update is an add;
//   O4: the 8 accumulators stay in ymm registers over the whole row, one reduction each.
// No multiply in the inner loop; the scales are applied by scale_epilogue().
#include "kernels/widely_linear/ukernels/t2p16_avx2.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

using namespace t2p16_avx2;

CPUKERN_WL_FUSED(widely_linear_f32_t2p16x4_1x1__avx2_bmi2) {
  const int64_t words = d.words;
  const uint32_t* ure = public_plane(data, d, stage, kUre);
  const uint32_t* uim = public_plane(data, d, stage, kUim);
  const uint32_t* wre = public_plane(data, d, stage, kWre);
  const uint32_t* wim = public_plane(data, d, stage, kWim);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * words;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
           a7 = a0;
    for (int64_t j = 0; j < words; ++j) {
      const uint32_t bu = ure[o + j], bv = uim[o + j], bw = wre[o + j], bz = wim[o + j];
      const Bits du = decode_pext(bu), dv = decode_pext(bv), dw = decode_pext(bw), dz = decode_pext(bz);
      for (int h = 0; h < 2; ++h) {
        const int64_t c = 16 * j + 8 * h;
        const __m256 xr = _mm256_load_ps(x.src[kXr] + c);
        const __m256 nxr = _mm256_load_ps(x.src[kNXr] + c);
        const __m256 xi = _mm256_load_ps(x.src[kXi] + c);
        const __m256 nxi = _mm256_load_ps(x.src[kNXi] + c);
        const Sel su = expand(du, h);
        a0 = step(a0, su, xr, nxr);  // d0 = U_re . x_re
        a5 = step(a5, su, xi, nxi);  // d5 = U_re . x_im
        const Sel sv = expand(dv, h);
        a1 = step(a1, sv, nxi, xi);  // d1 = U_im . (-x_im)
        a4 = step(a4, sv, xr, nxr);  // d4 = U_im . x_re
        const Sel sw = expand(dw, h);
        a2 = step(a2, sw, xr, nxr);  // d2 = W_re . x_re
        a7 = step(a7, sw, nxi, xi);  // d7 = W_re . (-x_im)
        const Sel sz = expand(dz, h);
        a3 = step(a3, sz, xi, nxi);  // d3 = W_im . x_im
        a6 = step(a6, sz, xr, nxr);  // d6 = W_im . x_re
      }
    }
    float* out = dots + (r - r0) * kNumSub;
    out[0] = hsum(a0);
    out[1] = hsum(a1);
    out[2] = hsum(a2);
    out[3] = hsum(a3);
    out[4] = hsum(a4);
    out[5] = hsum(a5);
    out[6] = hsum(a6);
    out[7] = hsum(a7);
  }
}

}  // namespace cpukern::widely_linear
