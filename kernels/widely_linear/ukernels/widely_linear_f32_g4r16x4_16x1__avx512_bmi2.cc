// Fused widely-linear micro-kernel, AVX-512F, layout g4r16x4 (see lookup_layout.cc): 16 rows
// per tile in the lanes, 4 columns per 16-entry vpermps lookup. Per group of 4 columns:
//   O2: the subset-sum tables of x_re, x_im and -x_im (built once per call) are loaded
//       once and shared by all 8 sub-GEMVs;
//   O1: each plane's (+1, -1) index pair is decoded once (two shifts) and drives both its
//       real-output and its imaginary-output lookups;
//   O3: d1 = U_im.(-x_im) and d7 = W_re.(-x_im) read the -x_im table: all updates add;
//   O4: the 8 accumulators (16 rows each) stay in registers over the whole row; no
//       horizontal reduction is needed. Scales are applied by scale_epilogue().
// No multiply in the inner loop. Registered as the avx512_bmi2 variant; the kernel itself
// needs only AVX-512F (the pext-decode kernel t2p16x4_1x1 is kept for the ablation).
#include "kernels/widely_linear/ukernels/g4r16_avx512.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

using namespace g4r16_avx512;

namespace {

template <int g>
CPUKERN_WL_INLINE void group(const __m512i* ch, const float* T, __m512 (&a)[8]) {
  // T: T_re at 0, T_im at 16, T_nim at 32.
  const Idx u = decode<g>(_mm512_load_si512(ch + kUre));
  a[0] = lookup(a[0], u, T);       // d0 = U_re . x_re
  a[5] = lookup(a[5], u, T + 16);  // d5 = U_re . x_im
  const Idx v = decode<g>(_mm512_load_si512(ch + kUim));
  a[1] = lookup(a[1], v, T + 32);  // d1 = U_im . (-x_im)
  a[4] = lookup(a[4], v, T);       // d4 = U_im . x_re
  const Idx w = decode<g>(_mm512_load_si512(ch + kWre));
  a[2] = lookup(a[2], w, T);       // d2 = W_re . x_re
  a[7] = lookup(a[7], w, T + 32);  // d7 = W_re . (-x_im)
  const Idx z = decode<g>(_mm512_load_si512(ch + kWim));
  a[3] = lookup(a[3], z, T + 16);  // d3 = W_im . x_im
  a[6] = lookup(a[6], z, T);       // d6 = W_im . x_re
}

}  // namespace

CPUKERN_WL_FUSED(widely_linear_f32_g4r16x4_16x1__avx512_bmi2) {
  const int64_t T = (d.n + 15) / 16, C = ((d.m + 3) / 4 + 3) / 4;
  const __m512i* base = static_cast<const __m512i*>(data);
  for (int64_t t = r0 / 16; t * 16 < r1; ++t) {
    __m512 a[8];
    for (auto& v : a) v = _mm512_setzero_ps();
    const __m512i* ch = base + (stage * T + t) * C * 4;
    const float* tab = x.table;
    for (int64_t c = 0; c < C; ++c, ch += 4, tab += 4 * 48) {
      group<0>(ch, tab, a);
      group<1>(ch, tab + 48, a);
      group<2>(ch, tab + 96, a);
      group<3>(ch, tab + 144, a);
    }
    alignas(64) float out[8][16];  // [k][row in tile]
    for (int k = 0; k < kNumSub; ++k) _mm512_store_ps(out[k], a[k]);
    for (int i = 0; i < 16 && t * 16 + i < r1; ++i)
      for (int k = 0; k < kNumSub; ++k) dots[(t * 16 + i - r0) * kNumSub + k] = out[k][i];
  }
}

}  // namespace cpukern::widely_linear
