// fp32 ternary GEMV, the FairyFuse kernel: public 2-bit words interleaved across 16-row tiles
// (t2p16r16), 16 columns in the lanes of a zmm. Per word: _pext_u32(word, 0xAAAAAAAA) ->
// 16-bit add mask, _pext_u32(word, 0x55555555) -> subtract mask, then
// acc = _mm512_mask_add_ps(acc, add, acc, x); acc = _mm512_mask_sub_ps(acc, sub, acc, x).
// Multiplication-free; each decoded mask pair is used for every batch row of the block.
// Per row the 16 lane sums are reduced in a fixed tree at the end.
// Compiled natively (avx512_bmi2 flags) and, with CPUKERN_SIMDE, against SIMDe.
#include <algorithm>
#include <cstring>

#include "kernels/common/simd_x86.h"
#include "kernels/ternary/ukernels/ukernels.h"


namespace cpukern::ternary {
namespace {

F32Geometry geometry(int64_t m, int64_t k) { return word_geometry(k, 64); }

int64_t packed_size(int64_t m, int64_t k) { return (m + 15) / 16 * words_for(k) * 64; }

void CPUKERN_UKERNEL_FN(ternary_gemv_f32_f32_t2p16r16_16x1, avx512_bmi2, xprep)(
    const float* x, const F32Geometry* geo, void* dst) {
  xprep_padded(x, geo, dst);
}

inline float hsum(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  for (int s = 8; s > 0; s >>= 1)
    for (int i = 0; i < s; ++i) t[i] += t[i + s];
  return t[0];
}

// R rows (starting at `w`, a row inside a tile) x NB batch rows, over all words.
template <int R, int NB>
__attribute__((always_inline)) inline void rows_kernel(const uint32_t* w, int64_t words,
                                                       const float* x, int64_t x_floats,
                                                       float* y, int64_t ldy, int64_t valid) {
  __m512 acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_setzero_ps();
  const float* xb[NB];
  xb[0] = x;
  for (int b = 1; b < NB; ++b) xb[b] = xb[b - 1] + x_floats;
  for (int64_t i = 0; i < words; ++i, w += 16) {
    __m512 xv[NB];
    for (int b = 0; b < NB; ++b) {
      xv[b] = _mm512_loadu_ps(xb[b]);
      xb[b] += 16;
    }
    for (int r = 0; r < R; ++r) {
      const uint32_t word = w[r];
      const uint16_t kadd = uint16_t(_pext_u32(word, 0xAAAAAAAAu));  // __mmask16
      const uint16_t ksub = uint16_t(_pext_u32(word, 0x55555555u));
      for (int b = 0; b < NB; ++b) {
        acc[r][b] = _mm512_mask_add_ps(acc[r][b], kadd, acc[r][b], xv[b]);
        acc[r][b] = _mm512_mask_sub_ps(acc[r][b], ksub, acc[r][b], xv[b]);
      }
    }
  }
  float* yb = y;
  for (int b = 0; b < NB; ++b, yb += ldy)
    for (int r = 0; r < R && r < valid; ++r) yb[r] = hsum(acc[r][b]);
}

template <int R, int NB>
__attribute__((always_inline)) inline void tiles_loop(const F32Args* a, const float* x,
                                                      float* y) {
  const int64_t words = a->geo->p0, tile_words = a->geo->tile_bytes >> 2;
  const int64_t x_floats = a->geo->x_bytes >> 2;
  const uint32_t* wt = static_cast<const uint32_t*>(a->w);
  for (int64_t left = a->rows; left > 0; left -= 16, wt += tile_words, y += 16) {
    const uint32_t* w = wt;
    float* yr = y;
    for (int64_t r0 = 0; r0 < 16 && r0 < left; r0 += R, w += R, yr += R)
      rows_kernel<R, NB>(w, words, x, x_floats, yr, a->ldy, left - r0);
  }
}

void CPUKERN_UKERNEL_FN(ternary_gemv_f32_f32_t2p16r16_16x1, avx512_bmi2, run)(const F32Args* a) {
  const int64_t x_floats = a->geo->x_bytes >> 2;
  const float* x = static_cast<const float*>(a->xp);
  float* y = a->y;
  // No pointer is used after a loop (GCC would compute its final value with an imul).
  for (int64_t b = a->batch; b > 0; b -= 4, x += 4 * x_floats, y += 4 * a->ldy) {
    if (b >= 4) {
      tiles_loop<4, 4>(a, x, y);
    } else if (b == 3) {
      tiles_loop<4, 3>(a, x, y);
    } else if (b == 2) {
      tiles_loop<8, 2>(a, x, y);
    } else {
      tiles_loop<16, 1>(a, x, y);
    }
  }
}

}  // namespace

const F32Ukernel CPUKERN_UKERNEL(ternary_gemv_f32_f32_t2p16r16_16x1, avx512_bmi2) = {
    CPUKERN_UKERNEL_NAME(ternary_gemv_f32_f32_t2p16r16_16x1, avx512_bmi2), "t2p16r16", 16, geometry,
    packed_size, CPUKERN_UKERNEL_FN(ternary_gemv_f32_f32_t2p16r16_16x1, avx512_bmi2, xprep),
    CPUKERN_UKERNEL_FN(ternary_gemv_f32_f32_t2p16r16_16x1, avx512_bmi2, run)};

}  // namespace cpukern::ternary
