// Fused widely-linear micro-kernel, AVX-512F + BMI2, public layout, one row x one batch row.
// Lanes = the 16 columns of a word. Per word:
//   O2: x_re, -x_re, x_im, -x_im loaded once and shared by all 8 sub-GEMVs;
//   O1: each plane word is decoded once (2 pext) and its masks drive both its real-output
//       and its imaginary-output accumulation;
//   O3: a "-1" lane takes the precomputed negated source, so every update is an add;
//   O4: the 8 accumulators stay in zmm registers over the whole row, one reduction each.
// The inner loop has no multiply; the scales are applied by scale_epilogue().
#include "kernels/widely_linear/ukernels/t2p16_avx512.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

using namespace t2p16_avx512;

CPUKERN_WL_FUSED(widely_linear_f32_t2p16x4_1x1__avx512_bmi2) {
  const int64_t words = d.words;
  const uint32_t* ure = public_plane(data, d, stage, kUre);
  const uint32_t* uim = public_plane(data, d, stage, kUim);
  const uint32_t* wre = public_plane(data, d, stage, kWre);
  const uint32_t* wim = public_plane(data, d, stage, kWim);
  const float* xr_p = x.src[kXr];
  const float* nxr_p = x.src[kNXr];
  const float* xi_p = x.src[kXi];
  const float* nxi_p = x.src[kNXi];
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * words;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
           a7 = a0;
    for (int64_t j = 0; j < words; ++j) {
      const __m512 xr = _mm512_load_ps(xr_p + 16 * j);
      const __m512 nxr = _mm512_load_ps(nxr_p + 16 * j);
      const __m512 xi = _mm512_load_ps(xi_p + 16 * j);
      const __m512 nxi = _mm512_load_ps(nxi_p + 16 * j);
      const Masks ku = decode(ure[o + j]);
      a0 = step(a0, ku, xr, nxr);   // d0 = U_re . x_re
      a5 = step(a5, ku, xi, nxi);   // d5 = U_re . x_im
      const Masks kv = decode(uim[o + j]);
      a1 = step(a1, kv, nxi, xi);   // d1 = U_im . (-x_im)
      a4 = step(a4, kv, xr, nxr);   // d4 = U_im . x_re
      const Masks kw = decode(wre[o + j]);
      a2 = step(a2, kw, xr, nxr);   // d2 = W_re . x_re
      a7 = step(a7, kw, nxi, xi);   // d7 = W_re . (-x_im)
      const Masks kz = decode(wim[o + j]);
      a3 = step(a3, kz, xi, nxi);   // d3 = W_im . x_im
      a6 = step(a6, kz, xr, nxr);   // d6 = W_im . x_re
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
