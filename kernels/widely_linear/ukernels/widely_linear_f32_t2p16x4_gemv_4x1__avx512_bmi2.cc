// One sub-GEMV (plane . source) of the naive unfused schedule, AVX-512F + BMI2, over the
// same bytes as the fused kernel. Four rows at a time (independent accumulators); each
// row is summed in the fused kernel's order, so fused and unfused results are identical.
#include "kernels/widely_linear/ukernels/t2p16_avx512.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

using namespace t2p16_avx512;

CPUKERN_WL_GEMV(widely_linear_f32_t2p16x4_gemv_4x1__avx512_bmi2) {
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
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t j = 0; j < words; ++j) {
      const __m512 xp = _mm512_load_ps(pos + 16 * j);
      const __m512 xn = _mm512_load_ps(neg + 16 * j);
      a0 = step(a0, decode(w0[j]), xp, xn);
      a1 = step(a1, decode(w1[j]), xp, xn);
      a2 = step(a2, decode(w2[j]), xp, xn);
      a3 = step(a3, decode(w3[j]), xp, xn);
    }
    dots[(r - r0) * kNumSub + k] = hsum(a0);
    dots[(r + 1 - r0) * kNumSub + k] = hsum(a1);
    dots[(r + 2 - r0) * kNumSub + k] = hsum(a2);
    dots[(r + 3 - r0) * kNumSub + k] = hsum(a3);
  }
  for (; r < r1; ++r) {
    const uint32_t* w0 = plane + r * words;
    __m512 a0 = _mm512_setzero_ps();
    for (int64_t j = 0; j < words; ++j)
      a0 = step(a0, decode(w0[j]), _mm512_load_ps(pos + 16 * j), _mm512_load_ps(neg + 16 * j));
    dots[(r - r0) * kNumSub + k] = hsum(a0);
  }
}

}  // namespace cpukern::widely_linear
