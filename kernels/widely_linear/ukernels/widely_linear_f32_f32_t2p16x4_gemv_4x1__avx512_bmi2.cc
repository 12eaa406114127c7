// One sub-GEMV (plane . source) of the naive unfused schedule in the paper's style
// (pext masks, masked add/sub), AVX-512F + BMI2, over the same bytes as the fused kernel.
// NR rows x NB batch rows of independent accumulators (4x1, 2x2, 1x3, 1x4); each row and
// batch row summed in the fused kernel's order, so fused and unfused results are identical.
#include "kernels/common/unroll.h"
#include "kernels/widely_linear/ukernels/t2p16_avx512.h"

namespace cpukern::widely_linear {
namespace {

template <int NR, int NB>
CPUKERN_WL_INLINE void pass(const char* row0, const Call& c, float* const (&dots)[NB]) {
  const uint32_t* w[NR];
  const char* p = row0;
  for (int r = 0; r < NR; ++r, p += c.loc.tile_stride) w[r] = reinterpret_cast<const uint32_t*>(p);
  const float* src[NB];
  for (int b = 0; b < NB; ++b) src[b] = c.x[b].src[kSubSrc[c.k]];
  __m512 a[NR][NB];
  for (auto& ar : a)
    for (auto& v : ar) v = _mm512_setzero_ps();
  const int64_t words = c.loc.inner;
  for (int64_t j = 0, col = 0; j < words; ++j, col += 16) {
    __m512 x[NB];
    for (int b = 0; b < NB; ++b) x[b] = _mm512_load_ps(src[b] + col);
CPUKERN_UNROLL_BY(4)
    for (int r = 0; r < NR; ++r) {
      const Masks k = decode(w[r][j]);
CPUKERN_UNROLL_BY(4)
      for (int b = 0; b < NB; ++b) a[r][b] = step(a[r][b], k, x[b]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int b = 0; b < NB; ++b) dots[b][(r << 3) + c.k] = hsum(a[r][b]);
}

template <int NR, int NB>
void rows(const Call& c) {
  const char* row = static_cast<const char*>(c.loc.w);
  float* dots[NB];
  for (int b = 0; b < NB; ++b) dots[b] = c.dots[b];
  // One loop, constant steps (no pointer used after it and no variable step count: GCC
  // would compute those offsets with an imul).
  for (int64_t left = c.rows; left > 0;) {
    if (left >= NR) {
      pass<NR, NB>(row, c, dots);
      for (int r = 0; r < NR; ++r) row += c.loc.tile_stride;
      for (int b = 0; b < NB; ++b) dots[b] += NR * kNumSub;
      left -= NR;
    } else {
      pass<1, NB>(row, c, dots);
      row += c.loc.tile_stride;
      for (int b = 0; b < NB; ++b) dots[b] += kNumSub;
      left -= 1;
    }
  }
}

}  // namespace

void CPUKERN_UKERNEL(widely_linear_f32_f32_t2p16x4_gemv_4x1, avx512_bmi2)(const Call& c) {
  switch (c.nb) {
    case 1: return rows<4, 1>(c);
    case 2: return rows<2, 2>(c);
    case 3: return rows<1, 3>(c);
    default: return rows<1, 4>(c);
  }
}

}  // namespace cpukern::widely_linear
