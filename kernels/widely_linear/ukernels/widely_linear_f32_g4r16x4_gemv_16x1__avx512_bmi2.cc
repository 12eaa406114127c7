// One sub-GEMV (plane . source table) of the naive unfused schedule over the g4r16x4 bytes,
// AVX-512F; each row summed in the fused kernel's order (identical results). Two tiles of
// 16 rows at a time for independent accumulators.
#include "kernels/widely_linear/ukernels/g4r16_avx512.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

using namespace g4r16_avx512;

namespace {

// Which of T_re (0), T_im (16), T_nim (32) sub-GEMV k reads.
constexpr int kTableOffset[kNumSub] = {0, 32, 0, 16, 0, 16, 0, 32};

template <int g>
CPUKERN_WL_INLINE __m512 group(__m512 acc, const __m512i* ch, const float* T) {
  return lookup(acc, decode<g>(_mm512_load_si512(ch)), T);
}

CPUKERN_WL_INLINE __m512 chunk(__m512 acc, const __m512i* ch, const float* tab) {
  acc = group<0>(acc, ch, tab);
  acc = group<1>(acc, ch, tab + 48);
  acc = group<2>(acc, ch, tab + 96);
  return group<3>(acc, ch, tab + 144);
}

CPUKERN_WL_INLINE void put(__m512 acc, int64_t t, int64_t r0, int64_t r1, int k, float* dots) {
  alignas(64) float out[16];
  _mm512_store_ps(out, acc);
  for (int i = 0; i < 16 && t * 16 + i < r1; ++i) dots[(t * 16 + i - r0) * kNumSub + k] = out[i];
}

}  // namespace

CPUKERN_WL_GEMV(widely_linear_f32_g4r16x4_gemv_16x1__avx512_bmi2) {
  const int64_t T = (d.n + 15) / 16, C = ((d.m + 3) / 4 + 3) / 4;
  const __m512i* base = static_cast<const __m512i*>(data) + kSubPlane[k];
  const float* table = x.table + kTableOffset[k];
  const int64_t t_end = (r1 + 15) / 16;
  int64_t t = r0 / 16;
  for (; t + 2 <= t_end; t += 2) {
    const __m512i* ch0 = base + (stage * T + t) * C * 4;
    const __m512i* ch1 = ch0 + C * 4;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    const float* tab = table;
    for (int64_t c = 0; c < C; ++c, ch0 += 4, ch1 += 4, tab += 4 * 48) {
      a0 = chunk(a0, ch0, tab);
      a1 = chunk(a1, ch1, tab);
    }
    put(a0, t, r0, r1, k, dots);
    put(a1, t + 1, r0, r1, k, dots);
  }
  for (; t < t_end; ++t) {
    const __m512i* ch = base + (stage * T + t) * C * 4;
    __m512 a0 = _mm512_setzero_ps();
    const float* tab = table;
    for (int64_t c = 0; c < C; ++c, ch += 4, tab += 4 * 48) a0 = chunk(a0, ch, tab);
    put(a0, t, r0, r1, k, dots);
  }
}

}  // namespace cpukern::widely_linear
