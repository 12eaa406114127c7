// int8 ternary GEMV on the fp32 path's own lut27r16 layout (one layout serves both modes: the
// prepared weights hold no second, int8-only copy), 16-row tiles, AVX-512 VNNI. Compiled
// natively (avx512_vnni flags) and, with CPUKERN_SIMDE, against SIMDe for any host.
//
// Per group of 3 columns x 16 rows (one 5-bit base-3 code per lane, layouts.h): vpermt2d
// looks the code up in a constant 27-entry table whose dword holds the bytes
// (w0 + 1, w1 + 1, w2 + 1, 0), and vpdpbusd multiplies them by the group's int8 activations
// (one broadcast dword; its 4th byte meets the table's 0). sum_j w_j q_j =
// sum_j (w_j + 1) q_j - sum_j q_j (the driver's xsum); int32 sums are exact, so the result
// equals every other int8 kernel's bit for bit. The same skeleton as the fp32 kernel, with
// the tables in registers instead of per-group activation tables. Measured on Zen 5
// (//benchmarks/ternary, 1 / 2 threads) against the q2b256 kernel: 32768x14336 cold 2.87 /
// 1.61 ms vs 5.68 / 3.05 (it reads 1.78 bits per weight instead of 2.0, and its decode keeps
// up), 4096x14336 B=16 hot 1.3x / 1.2x faster, B=1 hot about 15% slower (0.31 vs 0.27 ms).
#include <algorithm>
#include <cstring>

#include "kernels/common/simd_x86.h"
#include "kernels/common/unroll.h"
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/stream_prefetch.h"
#include "kernels/ternary/ukernels/ukernels.h"


namespace cpukern::ternary {
namespace {

constexpr int64_t kRows = layouts::kLut27r16Rows;  // rows per tile (lanes)
constexpr int64_t kCols = layouts::kLut27r16Cols;  // columns per block (6 groups of 3)
constexpr int kGroups = int(kCols / 3);

int64_t packed_size(int64_t m, int64_t k) { return layouts::lut27r16_size(m, k); }
// Bytes per row inside whole tiles (the driver starts row ranges on tile boundaries).
int64_t row_bytes(int64_t k) { return layouts::lut27r16_blocks(k) * 64 / kRows; }

struct Table {
  __m512i lo, hi;  // entries 0-15, 16-31 (27-31 zero)
};
Table make_table() {
  alignas(64) uint32_t t[32] = {};
  for (uint32_t c = 0; c < 27; ++c) t[c] = (c % 3) | ((c / 3) % 3) << 8 | (c / 9) << 16;
  return {_mm512_load_si512(t), _mm512_load_si512(t + 16)};
}

inline int32_t load_dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Where the blocks read their activations: blocks [0, nfull) the shared buffer (the whole
// 4-byte read of their last group lies inside the row's i8_kpad(k) zero-padded bytes), the
// rest a zeroed local copy of the tail.
struct XBlocks {
  const int8_t* x;  // the shared buffer, batch rows xs apart
  int64_t xs;
  int64_t nfull;
  const int8_t* tail;  // kTailBlocks blocks (+ 4 bytes) per batch row, tail_stride apart
  int64_t tail_stride;
  const int8_t* tail_at(int64_t blk, int b) const {
    return tail + b * tail_stride + (blk - nfull) * kCols;
  }
};
// Blocks past the shared buffer: at most 2 (i8_kpad is a multiple of 256 >= k).
constexpr int64_t kTailBlocks = 2;

// NT tiles x NB batch rows over every block; y[b * ldy + r] for r < valid.
template <int NT, int NB>
__attribute__((always_inline)) inline void tiles(const uint32_t* w, int64_t tile_words,
                                                 const XBlocks& xb, int64_t nblk,
                                                 const Table& tab, const int32_t* xsum,
                                                 int32_t* y, int64_t ldy, int64_t valid) {
  // Fewer than 8 (tile, row) chains leave vpdpbusd's latency exposed (a 640-row layer split
  // into 4-6 tiles per task ran at half speed on Zen 4): the groups alternate over NA
  // accumulators per chain (int32 sums are exact: the split changes no bit).
  constexpr int NA = NT * NB >= 8 ? 1 : NT * NB >= 4 ? 2 : 3;
  __m512i acc[NT][NB][NA];
CPUKERN_UNROLL_BY(8)
  for (int t = 0; t < NT; ++t)
CPUKERN_UNROLL_BY(4)
    for (int b = 0; b < NB; ++b)
CPUKERN_UNROLL_BY(3)
      for (int i = 0; i < NA; ++i) acc[t][b][i] = _mm512_setzero_si512();
  // One block: its NT tiles' codes x the NB rows' activations at xp[b].
  auto block = [&](int64_t blk, const int8_t* const* xp) __attribute__((always_inline)) {
    __m512i ix[NT];
CPUKERN_UNROLL_BY(8)
    for (int t = 0; t < NT; ++t) {
      const uint32_t* p = w + t * tile_words + blk * 16;
      ix[t] = _mm512_loadu_si512(p);
      prefetch_ahead_grouped(p, blk * 64, tile_words * 4, NT);
    }
CPUKERN_UNROLL_BY(6)
    for (int g = 0; g < kGroups; ++g) {
      __m512i xv[NB];
CPUKERN_UNROLL_BY(4)
      for (int b = 0; b < NB; ++b) xv[b] = _mm512_set1_epi32(load_dword(xp[b] + 3 * g));
CPUKERN_UNROLL_BY(8)
      for (int t = 0; t < NT; ++t) {
        const __m512i u = _mm512_permutex2var_epi32(tab.lo, ix[t], tab.hi);
CPUKERN_UNROLL_BY(4)
        for (int b = 0; b < NB; ++b)
          acc[t][b][g % NA] = _mm512_dpbusd_epi32(acc[t][b][g % NA], u, xv[b]);
        if (g + 1 < kGroups) ix[t] = cpukern_srli_epi32(ix[t], 5);
      }
    }
  };
  const int8_t* xp[NB];
  for (int b = 0; b < NB; ++b) xp[b] = xb.x + b * xb.xs;
  int64_t blk = 0;
  for (; blk < xb.nfull; ++blk) {  // the shared buffer, pointers stepping by a block
    block(blk, xp);
    for (int b = 0; b < NB; ++b) xp[b] += kCols;
  }
  for (; blk < nblk; ++blk) {  // the zeroed tail copy
    for (int b = 0; b < NB; ++b) xp[b] = xb.tail_at(blk, b);
    block(blk, xp);
  }
  for (int b = 0; b < NB; ++b) {
    const __m512i s = _mm512_set1_epi32(xsum[b]);
    for (int t = 0; t < NT; ++t) {
      alignas(64) int32_t out[kRows];
      __m512i sum = acc[t][b][0];
      for (int i = 1; i < NA; ++i) sum = _mm512_add_epi32(sum, acc[t][b][i]);
      _mm512_store_si512(out, _mm512_sub_epi32(sum, s));
      const int64_t n = std::min<int64_t>(kRows, valid - t * kRows);
      for (int64_t r = 0; r < n; ++r) y[b * ldy + t * kRows + r] = out[r];
    }
  }
}

// Every tile of the range, NT at a time, the rest one by one.
template <int NT, int NB>
void rows_loop(const I8Args* a, int64_t b0, const Table& tab) {
  const int64_t nblk = layouts::lut27r16_blocks(a->k), tile_words = nblk * 16;
  const int64_t kpad = i8_kpad(a->k);
  XBlocks xb{a->xq + b0 * a->xq_stride, a->xq_stride,
             std::min(nblk, (kpad - 1) / kCols), nullptr, 0};
  alignas(64) int8_t tail[NB][kTailBlocks * kCols + 4];
  if (xb.nfull < nblk) {
    const int64_t have = std::max<int64_t>(0, a->k - xb.nfull * kCols);  // < 2 blocks
    for (int b = 0; b < NB; ++b) {
      std::memset(tail[b], 0, sizeof(tail[b]));
      std::memcpy(tail[b], xb.x + b * xb.xs + xb.nfull * kCols, size_t(have));
    }
    xb.tail = &tail[0][0];
    xb.tail_stride = kTailBlocks * kCols + 4;
  }
  const uint32_t* w = static_cast<const uint32_t*>(a->w);
  const int32_t* xsum = a->xsum + b0;
  int32_t* y = a->y + b0 * a->ldy;
  int64_t r = 0;
  for (; r + NT * kRows <= a->rows; r += NT * kRows, w += NT * tile_words)
    tiles<NT, NB>(w, tile_words, xb, nblk, tab, xsum, y + r, a->ldy, NT * kRows);
  if constexpr (NT > 4) {  // the last < NT tiles: 4, 2, then 1 at a time
    if (r + 4 * kRows <= a->rows) {
      tiles<4, NB>(w, tile_words, xb, nblk, tab, xsum, y + r, a->ldy, 4 * kRows);
      r += 4 * kRows, w += 4 * tile_words;
    }
  }
  if constexpr (NT > 2) {
    if (r + 2 * kRows <= a->rows) {
      tiles<2, NB>(w, tile_words, xb, nblk, tab, xsum, y + r, a->ldy, 2 * kRows);
      r += 2 * kRows, w += 2 * tile_words;
    }
  }
  for (; r < a->rows; r += kRows, w += tile_words)
    tiles<1, NB>(w, tile_words, xb, nblk, tab, xsum, y + r, a->ldy, a->rows - r);
}

void run(const I8Args* a) {
  const Table tab = make_table();
  int64_t b = 0;
  for (; b + 4 <= a->batch; b += 4) rows_loop<4, 4>(a, b, tab);
  switch (a->batch - b) {
    case 3: rows_loop<4, 3>(a, b, tab); break;
    case 2: rows_loop<8, 2>(a, b, tab); break;
    case 1: rows_loop<8, 1>(a, b, tab); break;
    default: break;
  }
}

}  // namespace

const I8Ukernel CPUKERN_UKERNEL(ternary_gemv_f32_qd8_lut27r16_16x1, avx512_vnni) = {
    CPUKERN_UKERNEL_NAME(ternary_gemv_f32_qd8_lut27r16_16x1, avx512_vnni), "lut27r16", int(kRows),
    packed_size, row_bytes, run};

}  // namespace cpukern::ternary
