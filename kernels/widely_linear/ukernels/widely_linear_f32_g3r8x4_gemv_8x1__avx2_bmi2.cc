// One sub-GEMV (plane . source table) of the naive unfused schedule over the g3r8x4 bytes,
// AVX2; each row summed in the fused kernel's order (identical results). Two tiles of 8
// rows at a time for independent accumulators.
#include "kernels/widely_linear/ukernels/g3r8_avx2.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

using namespace g3r8_avx2;

namespace {

// Which of T_re (0), T_im (8), T_nim (16) sub-GEMV k reads.
constexpr int kTableOffset[kNumSub] = {0, 16, 0, 8, 0, 8, 0, 16};

template <int g>
CPUKERN_WL_INLINE __m256 group(__m256 acc, const __m256i* ch, const float* T) {
  return lookup(acc, decode<g>(_mm256_load_si256(ch)), T);
}

CPUKERN_WL_INLINE __m256 chunk(__m256 acc, const __m256i* ch, const float* tab) {
  acc = group<0>(acc, ch, tab);
  acc = group<1>(acc, ch, tab + 24);
  acc = group<2>(acc, ch, tab + 48);
  acc = group<3>(acc, ch, tab + 72);
  return group<4>(acc, ch, tab + 96);
}

CPUKERN_WL_INLINE void put(__m256 acc, int64_t t, int64_t r0, int64_t r1, int k, float* dots) {
  alignas(32) float out[8];
  _mm256_store_ps(out, acc);
  for (int i = 0; i < 8 && t * 8 + i < r1; ++i) dots[(t * 8 + i - r0) * kNumSub + k] = out[i];
}

}  // namespace

CPUKERN_WL_GEMV(widely_linear_f32_g3r8x4_gemv_8x1__avx2_bmi2) {
  const int64_t T = (d.n + 7) / 8, C = ((d.m + 2) / 3 + 4) / 5;
  const __m256i* base = static_cast<const __m256i*>(data) + kSubPlane[k];
  const float* table = x.table + kTableOffset[k];
  const int64_t t_end = (r1 + 7) / 8;
  int64_t t = r0 / 8;
  for (; t + 2 <= t_end; t += 2) {
    const __m256i* ch0 = base + (stage * T + t) * C * 4;
    const __m256i* ch1 = ch0 + C * 4;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    const float* tab = table;
    for (int64_t c = 0; c < C; ++c, ch0 += 4, ch1 += 4, tab += 5 * 24) {
      a0 = chunk(a0, ch0, tab);
      a1 = chunk(a1, ch1, tab);
    }
    put(a0, t, r0, r1, k, dots);
    put(a1, t + 1, r0, r1, k, dots);
  }
  for (; t < t_end; ++t) {
    const __m256i* ch = base + (stage * T + t) * C * 4;
    __m256 a0 = _mm256_setzero_ps();
    const float* tab = table;
    for (int64_t c = 0; c < C; ++c, ch += 4, tab += 5 * 24) a0 = chunk(a0, ch, tab);
    put(a0, t, r0, r1, k, dots);
  }
}

}  // namespace cpukern::widely_linear
