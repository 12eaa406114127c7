// Fused widely-linear micro-kernel in the paper's style (FairyFuse), AVX-512F + BMI2, public
// layout, one row at a time, up to 4 batch rows. Per 16-column word:
//   O1: each plane word is decoded once (2 pext -> k_pos, k_neg) and the masks drive both
//       its real-output and its imaginary-output masked add/sub, for every batch row;
//   O2: x_re, x_im, -x_im of the word are loaded once per batch row for all 8 sub-GEMVs;
//   O3: d1 = U_im.(-x_im) and d7 = W_re.(-x_im) read the precomputed -x_im: a pointer choice;
//   O4: the 8 accumulators per batch row stay in zmm registers over the whole row, one
//       horizontal reduction each; the scales are applied by scale_epilogue().
// With 3-4 batch rows the planes are visited in two passes (U, then W) so the 2*NP*NB
// accumulators fit in registers; each accumulator's order of additions is unchanged.
// No multiply in the inner loop (addressing by pointer/index increments).
#include "kernels/common/unroll.h"
#include "kernels/widely_linear/ukernels/t2p16_avx512.h"

namespace cpukern::widely_linear {
namespace {

// Sources of the two sub-GEMVs of plane p: kSubSrc[kPlaneSubA[p]], kSubSrc[kPlaneSubB[p]].
constexpr int kSrcA[4] = {kXr, kNXi, kXr, kXi};
constexpr int kSrcB[4] = {kXi, kXr, kNXi, kXr};

template <int P0, int NP, int NB>
CPUKERN_WL_INLINE void row_pass(const char* row0, const Call& c, float* const (&dots)[NB]) {
  const uint32_t* pl[NP];
  const char* p = row0;
  for (int i = 0; i < P0; ++i) p += c.loc.plane_stride;
  for (int i = 0; i < NP; ++i, p += c.loc.plane_stride) pl[i] = reinterpret_cast<const uint32_t*>(p);
  __m512 a[NB][2 * NP];
  for (auto& ab : a)
    for (auto& v : ab) v = _mm512_setzero_ps();
  const float* src[NB][4];
  for (int b = 0; b < NB; ++b)
    for (int s = 0; s < 4; ++s) src[b][s] = c.x[b].src[s];
  const int64_t words = c.loc.inner;
  for (int64_t j = 0, col = 0; j < words; ++j, col += 16) {
CPUKERN_UNROLL_BY(4)
    for (int q = 0; q < NP; ++q) {
      const Masks k = decode(pl[q][j]);
CPUKERN_UNROLL_BY(4)
      for (int b = 0; b < NB; ++b) {
        a[b][2 * q] = step(a[b][2 * q], k, _mm512_load_ps(src[b][kSrcA[P0 + q]] + col));
        a[b][2 * q + 1] = step(a[b][2 * q + 1], k, _mm512_load_ps(src[b][kSrcB[P0 + q]] + col));
      }
    }
  }
  for (int b = 0; b < NB; ++b)
    for (int q = 0; q < NP; ++q) {
      dots[b][kPlaneSubA[P0 + q]] = hsum(a[b][2 * q]);
      dots[b][kPlaneSubB[P0 + q]] = hsum(a[b][2 * q + 1]);
    }
}

template <int NB>
void rows(const Call& c) {
  const char* row = static_cast<const char*>(c.loc.w);
  float* dots[NB];
  for (int b = 0; b < NB; ++b) dots[b] = c.dots[b];
  for (int64_t left = c.rows; left > 0; --left, row += c.loc.tile_stride) {
    if constexpr (NB <= 2) {
      row_pass<0, 4, NB>(row, c, dots);
    } else {
      row_pass<0, 2, NB>(row, c, dots);
      row_pass<2, 2, NB>(row, c, dots);
    }
    for (int b = 0; b < NB; ++b) dots[b] += kNumSub;
  }
}

}  // namespace

void CPUKERN_UKERNEL(widely_linear_f32_f32_t2p16x4_1x1, avx512_bmi2)(const Call& c) {
  switch (c.nb) {
    case 1: return rows<1>(c);
    case 2: return rows<2>(c);
    case 3: return rows<3>(c);
    default: return rows<4>(c);
  }
}

}  // namespace cpukern::widely_linear
