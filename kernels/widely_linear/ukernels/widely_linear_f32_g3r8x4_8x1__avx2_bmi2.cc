// Fused widely-linear micro-kernel, AVX2, layout g3r8x4 (see lookup_layout.cc): 8 rows per
// tile in the lanes, 3 columns per lookup. Per group of 3 columns:
//   O2: the subset-sum tables of x_re, x_im and -x_im (built once per call) are loaded
//       once and shared by all 8 sub-GEMVs;
//   O1: each plane's (+1, -1) index pair is decoded once (two shifts) and drives both its
//       real-output and its imaginary-output lookups;
//   O3: d1 = U_im.(-x_im) and d7 = W_re.(-x_im) read the -x_im table: all updates add;
//   O4: the 8 accumulators (8 rows each) stay in registers over the whole row; no
//       horizontal reduction is needed. Scales are applied by scale_epilogue().
// No multiply in the inner loop. Registered as the avx2_bmi2 variant (the table's AVX2+BMI2
// slot); the kernel itself uses no BMI2 instruction.
#include "kernels/widely_linear/ukernels/g3r8_avx2.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

using namespace g3r8_avx2;

namespace {

template <int g>
CPUKERN_WL_INLINE void group(const __m256i* ch, const float* T, __m256 (&a)[8]) {
  // T: T_re at 0, T_im at 8, T_nim at 16.
  const Idx u = decode<g>(_mm256_load_si256(ch + kUre));
  a[0] = lookup(a[0], u, T);       // d0 = U_re . x_re
  a[5] = lookup(a[5], u, T + 8);   // d5 = U_re . x_im
  const Idx v = decode<g>(_mm256_load_si256(ch + kUim));
  a[1] = lookup(a[1], v, T + 16);  // d1 = U_im . (-x_im)
  a[4] = lookup(a[4], v, T);       // d4 = U_im . x_re
  const Idx w = decode<g>(_mm256_load_si256(ch + kWre));
  a[2] = lookup(a[2], w, T);       // d2 = W_re . x_re
  a[7] = lookup(a[7], w, T + 16);  // d7 = W_re . (-x_im)
  const Idx z = decode<g>(_mm256_load_si256(ch + kWim));
  a[3] = lookup(a[3], z, T + 8);   // d3 = W_im . x_im
  a[6] = lookup(a[6], z, T);       // d6 = W_im . x_re
}

}  // namespace

CPUKERN_WL_FUSED(widely_linear_f32_g3r8x4_8x1__avx2_bmi2) {
  const int64_t T = (d.n + 7) / 8, C = ((d.m + 2) / 3 + 4) / 5;
  const __m256i* base = static_cast<const __m256i*>(data);
  for (int64_t t = r0 / 8; t * 8 < r1; ++t) {
    __m256 a[8];
    for (auto& v : a) v = _mm256_setzero_ps();
    const __m256i* ch = base + (stage * T + t) * C * 4;
    const float* tab = x.table;
    for (int64_t c = 0; c < C; ++c, ch += 4, tab += 5 * 24) {
      group<0>(ch, tab, a);
      group<1>(ch, tab + 24, a);
      group<2>(ch, tab + 48, a);
      group<3>(ch, tab + 72, a);
      group<4>(ch, tab + 96, a);
    }
    alignas(32) float out[8][8];  // [k][row in tile]
    for (int k = 0; k < kNumSub; ++k) _mm256_store_ps(out[k], a[k]);
    for (int i = 0; i < 8 && t * 8 + i < r1; ++i)
      for (int k = 0; k < kNumSub; ++k) dots[(t * 8 + i - r0) * kNumSub + k] = out[k][i];
  }
}

}  // namespace cpukern::widely_linear
