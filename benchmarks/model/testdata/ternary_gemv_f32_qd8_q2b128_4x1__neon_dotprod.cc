// Fixture for model_test: an SDOT loop of known shape (8 sdot per iteration), compiled by
// model.py with the neon_dotprod flags (it fails to compile without them).
#include <arm_neon.h>

#include <cstdint>

int32_t fixture_sdot(const uint8_t* w, const int8_t* x, int64_t n) {
  int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0;
  const uint8x16_t three = vdupq_n_u8(3);
  for (int64_t i = 0; i < n; i += 4, w += 64, x += 128) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const uint8x16_t v = vld1q_u8(w + 16 * j);
      const int8x16_t q0 = vreinterpretq_s8_u8(vandq_u8(v, three));
      const int8x16_t q3 = vreinterpretq_s8_u8(vshrq_n_u8(v, 6));
      int32x4_t& acc = j == 0 ? a0 : j == 1 ? a1 : j == 2 ? a2 : a3;
      acc = vdotq_s32(acc, q0, vld1q_s8(x + 32 * j));
      acc = vdotq_s32(acc, q3, vld1q_s8(x + 32 * j + 16));
    }
  }
  return vaddvq_s32(vaddq_s32(vaddq_s32(a0, a1), vaddq_s32(a2, a3)));
}
