// fp32 ternary GEMV, lut27r16 layout, 16-row tiles, AVX-512F (no BMI2). Compiled natively
// (avx512 flags) and, with CPUKERN_SIMDE, against SIMDe for any host.
//
// Multiplication-free table lookup, 16 rows in the lanes of a zmm. Columns are taken in
// groups of 3; a group's weights (w0, w1, w2) in {-1, 0, +1}^3 form the base-3 code
// c = (w0 + 1) + 3 (w1 + 1) + 9 (w2 + 1) in [0, 27). Per group and batch row the activations'
// 27 signed sums T[c] = (w0 x0 + w1 x1) + w2 x2 sit in two zmm (32 entries, 27..31 zero), and
// one vpermt2ps (_mm512_permutex2var_ps, 5-bit index) looks up T[c_r] for 16 rows at once:
// acc += T[c]. Each lane of a tile holds six 5-bit codes per uint32 (18 columns per block,
// 64 bytes per tile per block: 1.78 bits per weight) consumed with shifts by 5.
// Per 3 columns x 16 rows: one lookup, one add, one shift, shared by all rows of the lane.
// Measured on Zen 5 (4096x14336, 1 thread, hot L3) against the alternatives of the same
// skeleton: 4-column add/subtract subset tables with vpermps 45 Gweights/s, 5-column
// add/subtract subset tables with vpermt2ps 58, 2-column base-3 codes with vpermps 45,
// this (3-column base-3 codes, vpermt2ps) 66-78.
//
// The sum over k is cut into chunks of kChunk blocks; a chunk's lane sums are added to y
// (the first chunk stores), so per row the order of additions depends on k only (not on
// the batch size, the row range or the thread count).
#include <algorithm>
#include <cstring>

#include "kernels/common/simd_x86.h"
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/stream_prefetch.h"
#include "kernels/ternary/ukernels/ukernels.h"


namespace cpukern::ternary {
namespace {

constexpr int64_t kGroups = layouts::kLut27r16Cols / 3;  // groups of 3 columns per block
constexpr int64_t kTabFloats = 32;  // table floats per group (27 used)
constexpr int64_t kBlockTabFloats = kGroups * kTabFloats;
constexpr int64_t kChunk = 28;      // blocks per accuracy chunk (504 columns, 168 terms)
// Blocks per pass over the row range: the activation tables of one pass for NB batch rows
// (NB * kPass * 768 bytes) stay in L2 while every tile of the range streams its weights.
constexpr int64_t kPassBytes = 512 * 1024;

F32Geometry geometry(int64_t m, int64_t k) {
  F32Geometry g;
  g.p0 = layouts::lut27r16_blocks(k);
  g.p1 = k;
  g.tile_bytes = g.p0 * 64;
  g.x_bytes = g.p0 * kBlockTabFloats * 4;
  return g;
}

int64_t packed_size(int64_t m, int64_t k) { return (m + 15) / 16 * geometry(m, k).tile_bytes; }

// Lane masks of the 32-entry table: entry c has weight (c / 3^i) % 3 - 1 on column i.
struct Masks {
  uint16_t pos[3][2], neg[3][2];  // __mmask16
};
constexpr Masks make_masks() {
  Masks mk{};
  for (int i = 0; i < 3; ++i)
    for (int h = 0; h < 2; ++h) {
      unsigned p = 0, n = 0;
      for (int l = 0; l < 16; ++l) {
        const int c = 16 * h + l;
        if (c >= 27) continue;
        const int d = i == 0 ? c % 3 : i == 1 ? (c / 3) % 3 : c / 9;
        if (d == 2) p |= 1u << l;
        if (d == 0) n |= 1u << l;
      }
      mk.pos[i][h] = uint16_t(p);
      mk.neg[i][h] = uint16_t(n);
    }
  return mk;
}
constexpr Masks kMasks = make_masks();

// Activations -> per group of 3 columns the 32-entry table of signed sums (columns past k
// are zero). The terms are +x (mask move), 0 - x (mask subtract) or +0.
void CPUKERN_UKERNEL_FN(ternary_gemv_f32_f32_lut27r16_16x1, avx512, xprep)(
    const float* x, const F32Geometry* geo, void* dst) {
  float* t = static_cast<float*>(dst);
  const int64_t k = geo->p1;
  const int64_t ngroups = geo->p0 * kGroups;
  const __m512 zero = _mm512_setzero_ps();
  int64_t j = 0;
  for (int64_t g = 0; g < ngroups; ++g, j += 3, t += kTabFloats) {
    __m512 xv[3];
    for (int i = 0; i < 3; ++i) xv[i] = _mm512_set1_ps(j + i < k ? x[j + i] : 0.0f);
    for (int h = 0; h < 2; ++h) {
      __m512 s[3];
      for (int i = 0; i < 3; ++i)
        s[i] = _mm512_mask_sub_ps(_mm512_maskz_mov_ps(kMasks.pos[i][h], xv[i]),
                                  kMasks.neg[i][h], zero, xv[i]);
      _mm512_storeu_ps(t + 16 * h, _mm512_add_ps(_mm512_add_ps(s[0], s[1]), s[2]));
    }
  }
}

inline void store_rows(float* y, __m512 d, int64_t valid, bool first) {
  if (valid >= 16) {
    if (!first) d = _mm512_add_ps(d, _mm512_loadu_ps(y));
    _mm512_storeu_ps(y, d);
    return;
  }
  alignas(64) float tmp[16];
  _mm512_store_ps(tmp, d);
  for (int64_t i = 0; i < valid; ++i) y[i] = first ? tmp[i] : y[i] + tmp[i];
}

// NT tiles (16 rows each) x NB batch rows over `nblk` blocks of one chunk.
template <int NT, int NB>
__attribute__((always_inline)) inline void chunk_kernel(const uint32_t* w, int64_t tile_words,
                                                        const float* tab, int64_t tab_floats,
                                                        int64_t nblk, float* y, int64_t ldy,
                                                        int64_t valid, bool first) {
  __m512 acc[NT][NB];
  for (int t = 0; t < NT; ++t)
    for (int b = 0; b < NB; ++b) acc[t][b] = _mm512_setzero_ps();
  const uint32_t* wt[NT];
  const float* tb[NB];
  wt[0] = w;
  for (int t = 1; t < NT; ++t) wt[t] = wt[t - 1] + tile_words;
  tb[0] = tab;
  for (int b = 1; b < NB; ++b) tb[b] = tb[b - 1] + tab_floats;
  for (int64_t blk = 0; blk < nblk; ++blk) {
    // Per batch row, the block's 6 tables stay in registers (12 zmm) and each tile runs its
    // 6 lookups in turn: short live ranges. Group-major order (every tile's lookup of group
    // g, then g + 1) let GCC hoist the lookups of later groups ahead of their adds and spill
    // them (a stack store and reload per lookup: 1.3x slower cold at batch 1).
    for (int t = 0; t < NT; ++t) prefetch_ahead(wt[t]);
    for (int b = 0; b < NB; ++b) {
      __m512 T0[kGroups], T1[kGroups];
      for (int g = 0; g < kGroups; ++g) {
        T0[g] = _mm512_loadu_ps(tb[b] + kTabFloats * g);
        T1[g] = _mm512_loadu_ps(tb[b] + kTabFloats * g + 16);
      }
      for (int t = 0; t < NT; ++t) {
        __m512i ix = _mm512_loadu_si512(wt[t]);
        for (int g = 0; g < kGroups; ++g) {
          acc[t][b] = _mm512_add_ps(acc[t][b], _mm512_permutex2var_ps(T0[g], ix, T1[g]));
          if (g + 1 < kGroups) ix = cpukern_srli_epi32(ix, 5);  // the lanes' next codes
        }
      }
      tb[b] += kBlockTabFloats;
    }
    for (int t = 0; t < NT; ++t) wt[t] += 16;
  }
  float* yb = y;
  for (int b = 0; b < NB; ++b, yb += ldy) {
    float* yt = yb;
    int64_t v = valid;
    for (int t = 0; t < NT; ++t, yt += 16, v -= 16) store_rows(yt, acc[t][b], v, first);
  }
}

// NT tiles over blocks [0, nblk) of one pass (nblk starts at a chunk boundary).
template <int NT, int NB>
__attribute__((always_inline)) inline void tiles_pass(const uint32_t* w, int64_t tile_words,
                                                      const float* tab, int64_t tab_floats,
                                                      int64_t nblk, float* y, int64_t ldy,
                                                      int64_t valid, bool first) {
  for (int64_t c0 = nblk; c0 > 0;
       c0 -= kChunk, w += kChunk * 16, tab += kChunk * kBlockTabFloats, first = false)
    chunk_kernel<NT, NB>(w, tile_words, tab, tab_floats, std::min(kChunk, c0), y, ldy, valid,
                         first);
}

// The range's last tiles (fewer than 2 S): S at a time where more than S - 1 remain, then
// S / 2, ..., 1 (a partial last tile included).
template <int S, int NB>
__attribute__((always_inline)) inline void tail_tiles(const uint32_t* w, int64_t tile_words,
                                                      const float* tab, int64_t tab_floats,
                                                      int64_t nblk, float* y, int64_t ldy,
                                                      int64_t left, bool first) {
  if (left > 16 * (S - 1)) {
    tiles_pass<S, NB>(w, tile_words, tab, tab_floats, nblk, y, ldy, left, first);
    w += S * tile_words, y += 16 * S, left -= 16 * S;
  }
  if constexpr (S > 1)
    if (left > 0) tail_tiles<S / 2, NB>(w, tile_words, tab, tab_floats, nblk, y, ldy, left, first);
}

// The largest power of two <= n, at most 16 (the tail step below an NT-tile step).
constexpr int floor_pow2(int n) { return n >= 16 ? 16 : n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1; }

// All tiles of the range over one pass: NT tiles at a time, the rest by 8, 4, 2, 1.
template <int NT, int NB>
__attribute__((always_inline)) inline void pass_loop(const F32Args* a, const uint32_t* w,
                                                     const float* tab, int64_t nblk,
                                                     float* y, bool first) {
  const int64_t tile_words = a->geo->tile_bytes >> 2;
  const int64_t tab_floats = a->geo->x_bytes >> 2;
  // Written so that no pointer is used after a loop: GCC would otherwise compute its final
  // value with an imul (the fp32 micro-kernels must contain no multiply at all).
  for (int64_t left = a->rows; left > 0; left -= 16 * NT, w += NT * tile_words, y += 16 * NT) {
    if (left > 16 * (NT - 1)) {
      tiles_pass<NT, NB>(w, tile_words, tab, tab_floats, nblk, y, a->ldy, left, first);
      continue;
    }
    tail_tiles<floor_pow2(NT - 1), NB>(w, tile_words, tab, tab_floats, nblk, y, a->ldy, left,
                                       first);
    break;
  }
}

template <int NT, int NB>
__attribute__((always_inline)) inline void batch_loop(const F32Args* a, int64_t pass_blocks,
                                                      const float* tab, float* y) {
  const int64_t nblk_all = a->geo->p0;
  const uint32_t* wp = static_cast<const uint32_t*>(a->w);
  const float* tp = tab;
  bool first = true;
  for (int64_t p0 = nblk_all; p0 > 0; p0 -= pass_blocks, wp += pass_blocks * 16,
               tp += pass_blocks * kBlockTabFloats, first = false)
    pass_loop<NT, NB>(a, wp, tp, std::min(pass_blocks, p0), y, first);
}

// Blocks per pass for NB batch rows: a multiple of kChunk (chunk boundaries stay fixed).
constexpr int64_t pass_blocks(int nb) {
  return std::max<int64_t>(1, kPassBytes / (nb * kBlockTabFloats * 4) / kChunk) * kChunk;
}

void CPUKERN_UKERNEL_FN(ternary_gemv_f32_f32_lut27r16_16x1, avx512, run)(const F32Args* a) {
  const int64_t x_floats = a->geo->x_bytes >> 2;
  const float* x = static_cast<const float*>(a->xp);
  float* y = a->y;
  // No pointer is used after a loop (GCC would compute its final value with an imul).
  for (int64_t b = a->batch; b > 0; b -= 4, x += 4 * x_floats, y += 4 * a->ldy) {
    if (b >= 4) {
      batch_loop<4, 4>(a, pass_blocks(4), x, y);
    } else if (b == 3) {
      batch_loop<4, 3>(a, pass_blocks(3), x, y);
    } else if (b == 2) {
      batch_loop<8, 2>(a, pass_blocks(2), x, y);
    } else {
      batch_loop<8, 1>(a, pass_blocks(1), x, y);
    }
  }
}

}  // namespace

const F32Ukernel CPUKERN_UKERNEL(ternary_gemv_f32_f32_lut27r16_16x1, avx512) = {
    CPUKERN_UKERNEL_NAME(ternary_gemv_f32_f32_lut27r16_16x1, avx512), "lut27r16", 16, geometry,
    packed_size, CPUKERN_UKERNEL_FN(ternary_gemv_f32_f32_lut27r16_16x1, avx512, xprep),
    CPUKERN_UKERNEL_FN(ternary_gemv_f32_f32_lut27r16_16x1, avx512, run)};

}  // namespace cpukern::ternary
