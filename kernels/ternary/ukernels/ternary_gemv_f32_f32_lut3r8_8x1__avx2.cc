// fp32 ternary GEMV, lut3r8 layout, 8-row tiles, AVX2 (packers: ternary_pack_lut3r8__*).
//
// Multiplication-free: per group of 3 columns the activations' 8 subset sums form a table
// T[s] = sum_{i in s} x_i in one ymm register; each lane (row) holds its 3-bit "add" pattern
// p and "subtract" pattern n for the group; vpermps looks up T[p] and T[n] for 8 rows at
// once: acc_add += T[p], acc_sub += T[n]. Patterns for 10 groups share a 32-bit lane and
// are consumed with shifts by 3 (vpermps reads only the low 3 bits). Per 30 columns a tile
// stores 64 bytes (8 add lanes, 8 subtract lanes): 2.13 bits per weight.
// The sum over k is cut into chunks of kChunk blocks (1530 columns); each chunk's
// acc_add - acc_sub is added to y, so per row the order of additions depends on k only.
#include <algorithm>
#include <cstring>

#include "kernels/common/simd_x86.h"
#include "kernels/common/unroll.h"
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

constexpr int64_t kGroups = layouts::kLut3r8Cols / 3;  // groups of 3 columns per block
constexpr int64_t kChunk = 51;                          // blocks per chunk

F32Geometry geometry(int64_t m, int64_t k) {
  F32Geometry g;
  g.p0 = layouts::lut3r8_blocks(k);
  g.p1 = k;
  g.tile_bytes = g.p0 * 64;
  g.x_bytes = g.p0 * kGroups * 32;
  return g;
}

int64_t packed_size(int64_t m, int64_t k) { return (m + 7) / 8 * geometry(m, k).tile_bytes; }

void ternary_gemv_f32_f32_lut3r8_8x1__avx2_xprep(const float* x, const F32Geometry* geo, void* dst) {
  float* t = static_cast<float*>(dst);
  const int64_t k = geo->p1;
  const int64_t ngroups = geo->p0 * kGroups;
  // Groups with all 3 columns inside k: T = ((x0 & m0) + (x1 & m1)) + (x2 & m2), where m_i
  // selects the lanes whose index has bit i set. Lane by lane this is the sum below (adding
  // +0.0 changes at most the sign of a zero entry, which no accumulator, starting at +0.0,
  // can see). It is the serial part of every call (~5k groups for k = 14336), so keep it
  // vectorised.
  const __m256 m0 = _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1));
  const __m256 m1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, -1, -1, 0, 0, -1, -1));
  const __m256 m2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, -1, -1, -1, -1));
  int64_t g = 0, j = 0;
  for (; j + 2 < k; ++g, j += 3, t += 8) {
    const __m256 a = _mm256_and_ps(_mm256_broadcast_ss(x + j), m0);
    const __m256 b = _mm256_and_ps(_mm256_broadcast_ss(x + j + 1), m1);
    const __m256 c = _mm256_and_ps(_mm256_broadcast_ss(x + j + 2), m2);
    _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a, b), c));
  }
  for (; g < ngroups; ++g, j += 3, t += 8) {
    const float cols[3] = {j < k ? x[j] : 0.0f, j + 1 < k ? x[j + 1] : 0.0f,
                           j + 2 < k ? x[j + 2] : 0.0f};
    ternary_lookup::subset_sums(cols, 3, t);
  }
}

inline void store_rows(float* y, int64_t ldy, __m256 d, int64_t valid, bool first) {
  if (valid >= 8) {
    if (!first) d = _mm256_add_ps(d, _mm256_loadu_ps(y));
    _mm256_storeu_ps(y, d);
    return;
  }
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, d);
  for (int64_t i = 0; i < valid; ++i) y[i] = first ? tmp[i] : y[i] + tmp[i];
}

// NT tiles (8 rows each) x NB batch rows over blocks [0, nblk) of one chunk.
template <int NT, int NB>
__attribute__((always_inline)) inline void chunk_kernel(const uint32_t* w, int64_t tile_words,
                                                        const float* tab, int64_t tab_floats,
                                                        int64_t nblk, float* y, int64_t ldy,
                                                        int64_t valid, bool first) {
  __m256 ap[NT][NB], an[NT][NB];
  for (int t = 0; t < NT; ++t)
    for (int b = 0; b < NB; ++b) ap[t][b] = an[t][b] = _mm256_setzero_ps();
  const uint32_t* wt[NT];
  const float* tb[NB];
  wt[0] = w;
  for (int t = 1; t < NT; ++t) wt[t] = wt[t - 1] + tile_words;
  tb[0] = tab;
  for (int b = 1; b < NB; ++b) tb[b] = tb[b - 1] + tab_floats;
  for (int64_t blk = 0; blk < nblk; ++blk) {
    __m256i ip[NT], in[NT];
    for (int t = 0; t < NT; ++t) {
      ip[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wt[t]));
      in[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wt[t] + 8));
      wt[t] += 16;
    }
CPUKERN_UNROLL_BY(10)
    for (int g = 0; g < kGroups; ++g) {
      for (int b = 0; b < NB; ++b) {
        const __m256 T = _mm256_loadu_ps(tb[b] + 8 * g);
        for (int t = 0; t < NT; ++t) {
          ap[t][b] = _mm256_add_ps(ap[t][b], _mm256_permutevar8x32_ps(T, ip[t]));
          an[t][b] = _mm256_add_ps(an[t][b], _mm256_permutevar8x32_ps(T, in[t]));
        }
      }
      for (int t = 0; t < NT; ++t) {
        ip[t] = _mm256_srli_epi32(ip[t], 3);
        in[t] = _mm256_srli_epi32(in[t], 3);
      }
    }
    for (int b = 0; b < NB; ++b) tb[b] += 8 * kGroups;
  }
  float* yb = y;
  for (int b = 0; b < NB; ++b, yb += ldy) {
    float* yt = yb;
    int64_t v = valid;
    for (int t = 0; t < NT; ++t, yt += 8, v -= 8)
      store_rows(yt, ldy, _mm256_sub_ps(ap[t][b], an[t][b]), v, first);
  }
}

// NT tiles (fewer at the end of the range: never read past its tiles) x NB batch rows.
template <int NT, int NB>
__attribute__((always_inline)) inline void tile_group(const uint32_t* w, int64_t tile_words,
                                                      const float* tab, int64_t tab_floats,
                                                      int64_t nblk, float* y, int64_t ldy,
                                                      int64_t left, bool first) {
  if (left > 8 * (NT - 1)) {
    chunk_kernel<NT, NB>(w, tile_words, tab, tab_floats, nblk, y, ldy, left, first);
  } else if (NT > 3 && left > 16) {
    chunk_kernel<3, NB>(w, tile_words, tab, tab_floats, nblk, y, ldy, left, first);
  } else if (NT > 2 && left > 8) {
    chunk_kernel<2, NB>(w, tile_words, tab, tab_floats, nblk, y, ldy, left, first);
  } else {
    chunk_kernel<1, NB>(w, tile_words, tab, tab_floats, nblk, y, ldy, left, first);
  }
}

// Tile groups outer, chunks inside, and inside a chunk every group of NB batch rows (then
// single rows): each task streams its weights once, in order (NT tiles = NT contiguous
// streams the hardware prefetcher follows), and a tile group's chunk (NT x 3.3 KB) stays in
// L1 across the batch groups. Per output the chunk sums are added in the same order for
// every batch size, so results do not change. Batch 1 takes 4 tiles per pass (8 accumulator
// chains, each table load feeds 8 vpermps): 1.2x over 2 tiles single-thread on Zen 5.
// Larger batches go in pairs over 2 tiles (two chunk tables, 32 KB, stay near L1). Zen 3,
// 1 thread, 6912x2560, cold: B = 4 / 8 in 2.97 / 5.85 ms against 4.61 / 8.90 for the old
// order (chunks outer, all tiles inner, 4 batch rows x 1 tile: every chunk's weights re-read
// from memory per batch group, 4 tables spilling to L2) and 3.25 / 6.45 for 4 tiles x 1 row.
template <int NT, int NB>
__attribute__((always_inline)) inline void tiles_outer(const F32Args* a) {
  const int64_t nblk_all = a->geo->p0;
  const int64_t tile_words = a->geo->tile_bytes >> 2;
  const int64_t tab_floats = a->geo->x_bytes >> 2;
  const int64_t ldy = a->ldy;
  const uint32_t* w = static_cast<const uint32_t*>(a->w);
  float* y = a->y;
  for (int64_t left = a->rows; left > 0; left -= 8 * NT, w += NT * tile_words, y += 8 * NT) {
    const uint32_t* wc = w;
    const float* tc = static_cast<const float*>(a->xp);
    for (int64_t c0 = 0; c0 < nblk_all;
         c0 += kChunk, wc += kChunk * 16, tc += kChunk * kGroups * 8) {
      const int64_t nblk = std::min(kChunk, nblk_all - c0);
      const bool first = c0 == 0;
      const float* tb = tc;
      float* yb = y;
      // One loop, no pointer used after it (a second loop would start from a final value GCC
      // computes with an imul; the fp32 micro-kernels contain no multiply at all).
      for (int64_t b = a->batch; b > 0;) {
        if (NB > 1 && b >= NB) {
          tile_group<NT, NB>(wc, tile_words, tb, tab_floats, nblk, yb, ldy, left, first);
          b -= NB, tb += NB * tab_floats, yb += NB * ldy;
        } else {
          tile_group<NT, 1>(wc, tile_words, tb, tab_floats, nblk, yb, ldy, left, first);
          b -= 1, tb += tab_floats, yb += ldy;
        }
      }
    }
  }
}

void ternary_gemv_f32_f32_lut3r8_8x1__avx2_run(const F32Args* a) {
  if (a->batch >= 2) return tiles_outer<2, 2>(a);
  tiles_outer<4, 1>(a);
}

}  // namespace

const F32Ukernel ternary_gemv_f32_f32_lut3r8_8x1__avx2 = {
    "ternary_gemv_f32_f32_lut3r8_8x1__avx2", "lut3r8", 8, geometry, packed_size,
    ternary_gemv_f32_f32_lut3r8_8x1__avx2_xprep, ternary_gemv_f32_f32_lut3r8_8x1__avx2_run};

}  // namespace cpukern::ternary
