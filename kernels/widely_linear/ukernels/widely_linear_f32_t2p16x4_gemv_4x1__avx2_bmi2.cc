// One sub-GEMV (plane . source) of the naive unfused schedule, AVX2 + BMI2 (pext decode), over the same bytes as
// the fused kernel; four rows at a time, each summed in the fused kernel's order.
#include "kernels/widely_linear/ukernels/t2p16_avx2.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

using namespace t2p16_avx2;

CPUKERN_WL_GEMV(widely_linear_f32_t2p16x4_gemv_4x1__avx2_bmi2) {
  const int64_t words = d.words;
  const uint32_t* plane = public_plane(data, d, stage, kSubPlane[k]);
  const float* pos = x.src[kSubSrc[k]];
  const float* neg = x.src[kSubSrc[k] ^ 1];
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint32_t* w0 = plane + r * words;
    const uint32_t* w1 = w0 + words;
    const uint32_t* w2 = w1 + words;
    const uint32_t* w3 = w2 + words;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t j = 0; j < words; ++j) {
      const Bits b0 = decode_pext(w0[j]), b1 = decode_pext(w1[j]), b2 = decode_pext(w2[j]),
                 b3 = decode_pext(w3[j]);
      for (int h = 0; h < 2; ++h) {
        const __m256 xp = _mm256_load_ps(pos + 16 * j + 8 * h);
        const __m256 xn = _mm256_load_ps(neg + 16 * j + 8 * h);
        a0 = step(a0, expand(b0, h), xp, xn);
        a1 = step(a1, expand(b1, h), xp, xn);
        a2 = step(a2, expand(b2, h), xp, xn);
        a3 = step(a3, expand(b3, h), xp, xn);
      }
    }
    dots[(r - r0) * kNumSub + k] = hsum(a0);
    dots[(r + 1 - r0) * kNumSub + k] = hsum(a1);
    dots[(r + 2 - r0) * kNumSub + k] = hsum(a2);
    dots[(r + 3 - r0) * kNumSub + k] = hsum(a3);
  }
  for (; r < r1; ++r) {
    const uint32_t* w0 = plane + r * words;
    __m256 a0 = _mm256_setzero_ps();
    for (int64_t j = 0; j < words; ++j)
      for (int h = 0; h < 2; ++h)
        a0 = step(a0, expand(decode_pext(w0[j]), h), _mm256_load_ps(pos + 16 * j + 8 * h),
                  _mm256_load_ps(neg + 16 * j + 8 * h));
    dots[(r - r0) * kNumSub + k] = hsum(a0);
  }
}

}  // namespace cpukern::widely_linear
