// The q2b int8 micro-kernel (K in SIMD lanes, rows in registers), for AVX2 (q2b128, ymm)
// and AVX-512BW (q2b256, zmm): q2b_ukernel<Vec, kVnni>(name), Vec one of int8_vec_x86.h's
// traits, kVnni (zmm only) vpdpbusd at batch 1 instead of vpmaddubsw + vpmaddwd. Each
// micro-kernel file instantiates it once, with its own ISA flags.
//
// Layout (written by ternary_pack_q2b*): per row, per block of C = Vec::kBits / 2 columns, C/4
// bytes; byte i holds (w + 1) in {0, 1, 2} of columns i, i + C/4, i + C/2, i + 3C/4 in bits 0-1, 2-3, 4-5, 6-7. Decode is a
// shift and an and per quarter; vpmaddubsw(u8 weights+1, s8 activations) gives int16 pair
// sums (|.| <= 508), four quarters and up to 8 blocks are summed in int16 (|.| <= 16256),
// then vpmaddwd with ones widens to int32. sum_j w_j q_j = sum_j (w_j + 1) q_j - sum_j q_j.
// The activations are read from the shared int8 buffer, zero-padded to a multiple of 256.
#pragma once
#include <algorithm>
#include <cstring>

#include "kernels/common/simd_x86.h"
#include "kernels/ternary/ukernels/int8_vec_x86.h"
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

template <class Vec, bool kVnni, int kG>
struct Q2b : Int8Blocks<Q2b<Vec, kVnni, kG>, Vec, 4, kVnni> {
  using Base = Int8Blocks<Q2b, Vec, 4, kVnni>;
  using typename Base::VI;
  using Base::kCols, Base::kI16Blocks, Base::kVB;

  static int64_t row_bytes(int64_t k) { return layouts::q2b_row_bytes(k, kCols); }

  // Where a tile's rows lie: row i's block b at w + i * rs + b * bs.
  struct Rows {
    const uint8_t* w;
    int64_t rs, bs;
    const uint8_t* at(int i, int64_t b) const { return w + i * rs + b * bs; }
  };

  // Row-major (kG = 1): the R rows of a group are read in step, each row's stream only rb
  // bytes long, so a fixed distance past a row lands in the group's own next rows.
  // Prefetching the same position one group ahead (R rows later), and at least
  // kStreamPrefetchBytes, keeps the cold stream ahead of the whole group. Zen 3, batch 1,
  // cold, against the fixed 1 KiB: 1.39x (4096x14336) to 1.78x (2560x6912) on 1 thread,
  // 1.45-1.68x on 2; two groups ahead was slower (docs/performance/ternary.md).
  // Interleaved (kG = 4): a 4-row tile reads one sequential stream, which the hardware
  // prefetcher follows alone (Zen 4, VNNI, batch 1, cold: 1.3-1.5x faster than with
  // prefetcht0 4 KiB ahead; prefetcht1 8 KiB ahead was no faster than none). A 2-row tile
  // reads every other pair of blocks, which it prefetches 16 group steps ahead (without:
  // batch 4 1.5x slower on 2560x6912).
  template <int R>
  static constexpr bool prefetches() { return kG == 1 || R < kG; }
  static constexpr int64_t kWidePrefetchBytes = 8192;
  template <int R>
  static int64_t prefetch_distance(int64_t rb) {
    if constexpr (kG > 1) return 16 * kG * kVB;
    return std::max<int64_t>(kStreamPrefetchBytes, R * rb);
  }

  // The four quarters (columns i, i + C/4, i + C/2, i + 3C/4 of byte i) of the block at p,
  // each w + 1 in {0, 1, 2} per byte.
  template <bool kPf>
  [[gnu::always_inline]] static inline void decode(const uint8_t* p, VI three, VI (&q)[4],
                                                   int64_t ahead) {
    const VI v = Vec::load(p);
    if constexpr (kPf) __builtin_prefetch(p + ahead, 0, 3);
    q[0] = Vec::and_(v, three);
    q[1] = Vec::and_(Vec::srli16(v, 2), three);
    q[2] = Vec::and_(Vec::srli16(v, 4), three);
    q[3] = Vec::and_(Vec::srli16(v, 6), three);
  }

  // VNNI: vpdpbusd(acc, u8 weights+1, s8 activations) sums 4 byte products straight into
  // int32 lanes (no int16 stage, no widening). q2b256: batch 1 only (Zen 5, 4096x14336 and
  // 13824x2560, 1 thread: 11-21% faster than vpmaddubsw at batch 1, 1-7% slower at batch 16,
  // where rows_kernel runs instead); q2b256r4: the 1-3 batch rows left by the wide kernel.
  // Decode: one shift and four ands per block. Quarters 1 and 3 stay in bits 2-3 (4 (w + 1))
  // and go to their own accumulator, shifted right by 2 per lane at the end: exact, as every
  // lane is a sum of multiples of 4 (|lane| <= K/32 * 8 * 127 < 2**31 for K <= 2**24).
  template <int R, int NB>
  static void rows_kernel_dp(const I8Args* a, Rows w, int64_t nblk, const int8_t* x,
                             const int32_t* xsum, int32_t* y) {
    const int64_t ahead = prefetch_distance<R>(w.rs);
    const VI three = Vec::set1_8(3), twelve = Vec::set1_8(12);
    typename Vec::Acc lo[R][NB], hi[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) lo[r][b] = hi[r][b] = typename Vec::Acc{};
    for (int64_t blk = 0; blk < nblk; ++blk) {
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w.at(r, blk);
        const VI v = Vec::load(p), v4 = Vec::srli16(v, 4);
        if constexpr (prefetches<R>()) __builtin_prefetch(p + ahead, 0, 3);
        for (int b = 0; b < NB; ++b) {
          const int8_t* xb = x + b * a->xq_stride + blk * kCols;
          lo[r][b] = Vec::dpbusd(lo[r][b], Vec::and_(v, three), Vec::load(xb));
          hi[r][b] = Vec::dpbusd(hi[r][b], Vec::and_(v, twelve), Vec::load(xb + kVB));
          lo[r][b] = Vec::dpbusd(lo[r][b], Vec::and_(v4, three), Vec::load(xb + 2 * kVB));
          hi[r][b] = Vec::dpbusd(hi[r][b], Vec::and_(v4, twelve), Vec::load(xb + 3 * kVB));
        }
      }
    }
    for (int b = 0; b < NB; ++b) {
      VI t[R];
      for (int r = 0; r < R; ++r)
        t[r] = Vec::add32(Vec::from_acc(lo[r][b]), Vec::srai32(Vec::from_acc(hi[r][b]), 2));
      store_sums<R>(t, xsum[b], y + b * a->ldy);
    }
  }

  // VNNI for 4+ batch rows: each block fully decoded (3 shifts, 4 ands) and every quarter's
  // activations loaded once for the tile's R rows (R x NB accumulators, no split): the split
  // kernel above keeps 2 accumulators per row and batch row, too many registers for NB > 2.
  // Weights prefetched into L2 8 KiB ahead, where the NB rows' activations (4 x K bytes) do
  // not compete with them in L1 (Zen 4, cold, 1 thread: 2560x6912 batch 4 / 8 1.75x / 1.4x,
  // 6912x2560 1.1x, batch 64 hot 1.05-1.15x; prefetcht0 4 KiB: 1.4x at batch 4).
  template <int R, int NB>
  static void rows_kernel_dp_wide(const I8Args* a, Rows w, int64_t nblk, const int8_t* x,
                                  const int32_t* xsum, int32_t* y) {
    const VI three = Vec::set1_8(3);
    typename Vec::Acc acc[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) acc[r][b] = typename Vec::Acc{};
    for (int64_t blk = 0; blk < nblk; ++blk) {
      VI v[R];
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = w.at(r, blk);
        v[r] = Vec::load(p);
        __builtin_prefetch(p + kWidePrefetchBytes, 0, 2);  // prefetcht1
      }
      for (int q = 0; q < 4; ++q) {
        VI xq[NB];
        for (int b = 0; b < NB; ++b) xq[b] = Vec::load(x + b * a->xq_stride + blk * kCols + q * kVB);
        for (int r = 0; r < R; ++r) {
          const VI wq = Vec::and_(q == 0 ? v[r] : Vec::srli16(v[r], 2 * q), three);
          for (int b = 0; b < NB; ++b) acc[r][b] = Vec::dpbusd(acc[r][b], wq, xq[b]);
        }
      }
    }
    for (int b = 0; b < NB; ++b) {
      VI t[R];
      for (int r = 0; r < R; ++r) t[r] = Vec::from_acc(acc[r][b]);
      store_sums<R>(t, xsum[b], y + b * a->ldy);
    }
  }

  // y[r] = the lane sum of t[r] - xsum, r < R; 4 rows at a time in one reduction.
  template <int R>
  static void store_sums(const VI (&t)[R], int32_t xsum, int32_t* y) {
    if constexpr (R % 4 == 0) {
      for (int r = 0; r < R; r += 4) {
        const __m128i s = Vec::hsum4(t[r], t[r + 1], t[r + 2], t[r + 3]);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + r), _mm_sub_epi32(s, _mm_set1_epi32(xsum)));
      }
    } else {
      for (int r = 0; r < R; ++r) y[r] = Vec::hsum32(t[r]) - xsum;
    }
  }

  template <int R, int NB>
  static void rows_kernel(const I8Args* a, Rows w, int64_t nblk, const int8_t* x,
                          const int32_t* xsum, int32_t* y) {
    const int64_t ahead = prefetch_distance<R>(w.rs);
    const VI three = Vec::set1_8(3), ones = Vec::set1_16(1);
    VI acc[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) acc[r][b] = Vec::zero();
    for (int64_t b0 = 0; b0 < nblk; b0 += kI16Blocks) {
      const int64_t b1 = std::min(nblk, b0 + kI16Blocks);
      VI s[R][NB];
      for (int r = 0; r < R; ++r)
        for (int b = 0; b < NB; ++b) s[r][b] = Vec::zero();
      for (int64_t blk = b0; blk < b1; ++blk) {
        for (int r = 0; r < R; ++r) {
          VI q[4];
          decode<prefetches<R>()>(w.at(r, blk), three, q, ahead);
          for (int b = 0; b < NB; ++b) {
            const int8_t* xb = x + b * a->xq_stride + blk * kCols;
            const VI p01 = Vec::add16(Vec::maddubs(q[0], Vec::load(xb)),
                                      Vec::maddubs(q[1], Vec::load(xb + kVB)));
            const VI p23 = Vec::add16(Vec::maddubs(q[2], Vec::load(xb + 2 * kVB)),
                                      Vec::maddubs(q[3], Vec::load(xb + 3 * kVB)));
            s[r][b] = Vec::add16(s[r][b], Vec::add16(p01, p23));
          }
        }
      }
      for (int r = 0; r < R; ++r)
        for (int b = 0; b < NB; ++b) acc[r][b] = Vec::add32(acc[r][b], Vec::madd16(s[r][b], ones));
    }
    for (int b = 0; b < NB; ++b) {
      VI t[R];
      for (int r = 0; r < R; ++r) t[r] = acc[r][b];
      store_sums<R>(t, xsum[b], y + b * a->ldy);
    }
  }

  // Interleaved layouts: 4-row tiles for 1-3 batch rows (a 2-row tile would read each group
  // twice, and only these batches wait for memory). VNNI: 4 x 4 tiles of the wide kernel
  // from 4 batch rows (Zen 4, 1 thread, BitNet's MLP shapes at batch 64-512: 1.3-1.56x the
  // split kernel's 4 x 2, which reloads activations per row and spills; 4 x 5, and 2 x 4
  // split, were slower; row chunks kept in L2 gained nothing), then the split kernel;
  // vpmaddubsw tiles take 4 batch rows in 2-row tiles, compute-bound there (the second pass
  // over a group hits L1/L2).
  static void run(const I8Args* a) {
    if constexpr (kG == 1) {
      Base::run(a);
    } else {
      int64_t b = 0;
      if constexpr (kVnni)
        for (; b + 4 <= a->batch; b += 4) rows_loop<4, 4, true, true>(a, b);
      else
        for (; b + 4 <= a->batch; b += 4) rows_loop<2, 4>(a, b);
      for (; b + 2 <= a->batch; b += 2) rows_loop<4, 2, kVnni>(a, b);
      if (b < a->batch) rows_loop<4, 1, kVnni>(a, b);
    }
  }

  template <int R, int NB, bool DP = false, bool kWide = false>
  static void rows_loop(const I8Args* a, int64_t b0) {
    static_assert(kG == 1 || kG % R == 0, "a tile's rows lie in one interleaved group");
    const int64_t rb = row_bytes(a->k), nblk = rb / kVB, grouped = a->rows / kG * kG;
    const uint8_t* w = static_cast<const uint8_t*>(a->w);
    const int8_t* x = a->xq + b0 * a->xq_stride;
    const int32_t* xsum = a->xsum + b0;
    int32_t* y = a->y + b0 * a->ldy;
    Base::template row_groups<R>(a->rows, [&](auto n, int64_t r) {
      const Rows rows = kG > 1 && r < grouped
                            ? Rows{w + layouts::q2b_block_at(r, a->rows, rb, 0, kVB, kG), kVB,
                                   kG * kVB}
                            : Rows{w + r * rb, rb, kVB};
      if constexpr (kWide)
        rows_kernel_dp_wide<decltype(n)::value, NB>(a, rows, nblk, x, xsum, y + r);
      else if constexpr (DP)
        rows_kernel_dp<decltype(n)::value, NB>(a, rows, nblk, x, xsum, y + r);
      else
        rows_kernel<decltype(n)::value, NB>(a, rows, nblk, x, xsum, y + r);
    });
  }
};

// kG: rows interleaved per group (1: q2b128 / q2b256, 4: q2b128r4 / q2b256r4; layouts.h).
template <class Vec, bool kVnni = false, int kG = 1>
constexpr I8Ukernel q2b_ukernel(const char* name) {
  constexpr bool zmm = Vec::kBits == 512;
  return Q2b<Vec, kVnni, kG>::ukernel(
      name, kG == 1 ? (zmm ? "q2b256" : "q2b128") : (zmm ? "q2b256r4" : "q2b128r4"));
}

}  // namespace
}  // namespace cpukern::ternary
