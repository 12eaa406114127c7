// The batched fused lookup kernel (2..4 batch rows), over the same g3r8x4 / g4r16x4 bytes
// as lookup_impl.h and summing in exactly its order, so results are bitwise identical to
// the B = 1 kernel, the unfused schedule and any batch split.
//
// Why a second kernel: with vpermps, every (row, sub-GEMV, batch row, group) update costs
// two permutes, a subtract and an add on 16-lane vectors; at 4 batch rows the fused and
// the unfused schedule do the same number of them (decode is shared by the batch rows in
// both), so fusion saved nothing and both ran at the permute/add port limit. Here the roles
// of rows and lanes are swapped:
//   * one ymm lane group holds the 4 batch rows x {x_re, x_im} (or {x_re, -x_im}) of ONE
//     weight row, so one add updates the plane's real- and imaginary-output sub-GEMVs of
//     all 4 batch rows at once (O1 + O2 carried into the vector width: 8 updates per add);
//   * the table is "signed": per group of G columns, entry code(pos, neg) =
//     T[pos] - T[neg] (3^G entries: 27 for G = 3, 81 for G = 4), computed with the same
//     single rounding the lookup kernel applies before its add, so an update is one add of
//     a table row addressed by a precomputed byte offset: acc += D[code].
//   * the signed tables of a column block (<= ~21 KB, L1) are built per task from the
//     per-call interleaved table (Ukernel::build_table_batch) and reused by every row of the
//     task; per row the partial sums live in a small buffer between column blocks. Each
//     accumulator still adds its groups in column order starting from +0.0, so nothing
//     depends on the blocking, the task size or the thread count.
// Codes are computed for R rows at a time in vector registers: the pattern bits give
// b3(pos) and b3(neg) (sum of 3^j over set bits) by a permute of a constant table, and
// offset = 64 * (b3(pos) + 2 b3(neg)) from pre-scaled tables. No multiply instruction.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/common/unroll.h"
#include "kernels/widely_linear/ukernels/lookup_impl.h"

namespace cpukern::widely_linear::signed_impl {

// Floats per entry of the interleaved table: [x_re b0..3 | x_im b0..3 | x_re | -x_im].
inline constexpr int kEntry = 16;
// Half (float offset in an entry) each plane reads: [x_re | x_im] or [x_re | -x_im].
inline constexpr int kHalf[4] = {0, 8, 8, 0};
// Sub-GEMV of lanes 0..3 and 4..7 of plane p's accumulator.
inline constexpr int kLo[4] = {0, 4, 2, 6};
inline constexpr int kHi[4] = {5, 1, 7, 3};

constexpr int pow3(int g) { return g == 0 ? 1 : 3 * pow3(g - 1); }

// b3(mask) * scale for every G-bit mask.
template <int G>
struct Codes {
  static constexpr int kN = pow3(G);
  int b3[1 << G] = {};
  int pos[pow3(G)] = {}, neg[pow3(G)] = {};  // float offsets (x kEntry) of T[pos], T[neg]
  constexpr Codes() {
    for (int m = 0; m < (1 << G); ++m) {
      int v = 0, p = 1;
      for (int j = 0; j < G; ++j, p *= 3)
        if ((m >> j) & 1) v += p;
      b3[m] = v;
    }
    for (int c = 0; c < kN; ++c) {
      int x = c, pm = 0, nm = 0;
      for (int j = 0; j < G; ++j) {
        if (x % 3 == 1) pm |= 1 << j;
        if (x % 3 == 2) nm |= 1 << j;
        x /= 3;
      }
      pos[c] = pm * kEntry;
      neg[c] = nm * kEntry;
    }
  }
};

template <int i, int N, class F>
CPUKERN_WL_INLINE void static_for(F&& f) {
  if constexpr (i < N) {
    f(std::integral_constant<int, i>{});
    static_for<i + 1, N>(f);
  }
}

// Signed tables of `ng` consecutive groups: D[g][code][16] = T[pos] - T[neg] lane-wise.
template <class V>
CPUKERN_WL_INLINE void build_signed(const float* gt, int64_t ng, float* D) {
  static constexpr Codes<V::kG> kC{};
  for (; ng > 0; --ng, gt += V::kE * kEntry) {
    for (int c = 0; c < Codes<V::kG>::kN; ++c, D += kEntry) {
      const float* tp = gt + kC.pos[c];
      const float* tn = gt + kC.neg[c];
      V::sub16(D, tp, tn);
    }
  }
}

// Byte offsets (code * 64) of groups [0, NG) of one chunk-block for R rows: idx[(g*4+p)*R + r].
template <class V, int g, int NGC>
CPUKERN_WL_INLINE void codes_chunk(const typename V::ivec* ch, int32_t* idx) {
CPUKERN_UNROLL_BY(4)
  for (int p = 0; p < 4; ++p) {
    const typename V::ivec w = V::load(ch + p);
    V::store_i(idx + ((g * 4 + p) << V::kLogR), V::template code_off<V::kG * g>(w));
  }
  if constexpr (g + 1 < NGC) codes_chunk<V, g + 1, NGC>(ch, idx);
}

// One row: its 4 plane accumulators over NCH chunks (NCH * K groups) of the block.
template <class V, int NGB>
CPUKERN_WL_INLINE void row_block(const char* D, const int32_t* idx, float* part, bool first) {
  __m256 a[4];
  for (int p = 0; p < 4; ++p) a[p] = first ? _mm256_setzero_ps() : _mm256_load_ps(part + 8 * p);
  static_for<0, NGB>([&](auto gi) {
    constexpr int g = decltype(gi)::value;
    static_for<0, 4>([&](auto pi) {
      constexpr int p = decltype(pi)::value;
      constexpr int disp = (g * Codes<V::kG>::kN * kEntry + kHalf[p]) * 4;
      const int32_t off = idx[(g * 4 + p) << V::kLogR];
      a[p] = _mm256_add_ps(a[p], _mm256_load_ps(reinterpret_cast<const float*>(D + disp + off)));
    });
  });
  for (int p = 0; p < 4; ++p) _mm256_store_ps(part + 8 * p, a[p]);
}

// Rows [0, rows) of the call (rows <= kMaxRows), chunks in blocks of NCH.
template <class V, int NCH, int kMaxRows>
void pass(const Call& c, const char* w0, int64_t rows, const float* gt, float* const (&dots)[4],
          int nb) {
  constexpr int kNG = NCH * V::kK;  // groups per block
  constexpr int64_t kGroupFloats = Codes<V::kG>::kN * kEntry;
  // A code's offset b3(pos) + 2 b3(neg) reaches 3 (3^G - 1) / 2 when the layout's bytes set
  // both pattern bits of a column (an invalid weight: any bytes of an imported buffer can).
  // Such an entry reads the next group's table, or past the last group this zeroed tail, so
  // every byte value stays in bounds (the result for an invalid weight is meaningless).
  constexpr int64_t kTailFloats = (3 * (Codes<V::kG>::kN - 1) / 2 + 1 - Codes<V::kG>::kN) * kEntry;
  alignas(64) float D[kNG * kGroupFloats + kTailFloats];
  alignas(64) float part[kMaxRows * 32];
  alignas(64) int32_t idx[kNG * 4 * V::kR];
  const int64_t C = c.loc.inner;
  constexpr int64_t chunk_bytes = 4 * V::kR * 4;
  auto block = [&](auto nch_c, int64_t c0) {
    constexpr int nch = decltype(nch_c)::value;
    constexpr int ng = nch * V::kK;
    build_signed<V>(gt, ng, D);
    std::memset(D + ng * kGroupFloats, 0, kTailFloats * sizeof(float));
    const char* w = w0;
    float* pr = part;
    for (int64_t left = rows; left > 0; left -= V::kR, w += c.loc.tile_stride) {
      static_for<0, nch>([&](auto ci) {
        constexpr int cc = decltype(ci)::value;
        codes_chunk<V, 0, V::kK>(reinterpret_cast<const typename V::ivec*>(w + cc * chunk_bytes),
                                 idx + ((cc * V::kK * 4) << V::kLogR));
      });
      const int32_t* ir = idx;
      for (int64_t r = left < V::kR ? left : V::kR; r > 0; --r, ++ir, pr += 32)
        row_block<V, ng>(reinterpret_cast<const char*>(D), ir, pr, c0 == 0);
    }
  };
  int64_t c0 = 0;
  for (; c0 + NCH <= C; c0 += NCH) {
    block(std::integral_constant<int, NCH>{}, c0);
    w0 += NCH * chunk_bytes;
    gt += NCH * V::kK * V::kE * kEntry;
  }
  if constexpr (NCH > 1)
    for (; c0 < C; ++c0) {
      block(std::integral_constant<int, 1>{}, c0);
      w0 += chunk_bytes;
      gt += V::kK * V::kE * kEntry;
    }
  // Partial sums -> dots[b][row * 8 + k].
  const float* pr = part;
  for (int64_t r = 0; r < rows; ++r, pr += 32) {
    const int64_t o = r << 3;
    for (int p = 0; p < 4; ++p)
      for (int b = 0; b < nb; ++b) {
        dots[b][o + kLo[p]] = pr[8 * p + b];
        dots[b][o + kHi[p]] = pr[8 * p + 4 + b];
      }
  }
}

// kMaxRows: rows of one pass (partial-sum buffer kMaxRows x 32 floats).
template <class V, int NCH, int kMaxRows>
void fused(const Call& c) {
  const char* w = static_cast<const char*>(c.loc.w);
  float* dots[4] = {};
  for (int b = 0; b < c.nb; ++b) dots[b] = c.dots[b];
  for (int64_t left = c.rows; left > 0; left -= kMaxRows) {
    const int64_t rows = left < kMaxRows ? left : kMaxRows;
    pass<V, NCH, kMaxRows>(c, w, rows, c.gtable, dots, c.nb);
    for (int t = 0; t < kMaxRows / V::kR; ++t) w += c.loc.tile_stride;
    for (int b = 0; b < c.nb; ++b) dots[b] += kMaxRows * kNumSub;
  }
}

}  // namespace cpukern::widely_linear::signed_impl
