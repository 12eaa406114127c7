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

template <class Vec, bool kVnni>
struct Q2b : Int8Blocks<Q2b<Vec, kVnni>, Vec, 4, kVnni> {
  using Base = Int8Blocks<Q2b, Vec, 4, kVnni>;
  using typename Base::VI;
  using Base::kCols, Base::kI16Blocks, Base::kVB;

  static int64_t row_bytes(int64_t k) { return layouts::q2b_row_bytes(k, kCols); }

  // The R rows of a group lie side by side (row-major layout), read in step: each row's
  // stream runs only rb bytes, so a fixed distance past a row lands in the group's own next
  // rows. Prefetching the same position one group ahead (R rows later), and at least
  // kStreamPrefetchBytes, keeps the cold stream ahead of the whole group. Zen 3, batch 1,
  // cold, against the fixed 1 KiB: 1.39x (4096x14336) to 1.78x (2560x6912) on 1 thread,
  // 1.45-1.68x on 2; two groups ahead was slower (docs/performance/ternary.md).
  static int64_t prefetch_distance(int64_t rb, int R) {
    return std::max<int64_t>(kStreamPrefetchBytes, R * rb);
  }

  // The four quarters (columns i, i + C/4, i + C/2, i + 3C/4 of byte i) of the block at p,
  // each w + 1 in {0, 1, 2} per byte.
  [[gnu::always_inline]] static inline void decode(const uint8_t* p, VI three, VI (&q)[4],
                                                   int64_t ahead) {
    const VI v = Vec::load(p);
    __builtin_prefetch(p + ahead, 0, 3);
    q[0] = Vec::and_(v, three);
    q[1] = Vec::and_(Vec::srli16(v, 2), three);
    q[2] = Vec::and_(Vec::srli16(v, 4), three);
    q[3] = Vec::and_(Vec::srli16(v, 6), three);
  }

  // VNNI: vpdpbusd(acc, u8 weights+1, s8 activations) sums 4 byte products straight into
  // int32 lanes (no int16 stage, no widening). Used for batch 1 only: measured on Zen 5
  // (4096x14336 and 13824x2560, 1 thread) it is 11-21% faster than vpmaddubsw at batch 1 and
  // 1-7% slower at batch 16, where rows_kernel runs instead.
  template <int R, int NB>
  static void rows_kernel_dp(const I8Args* a, const uint8_t* w, int64_t rb, const int8_t* x,
                             const int32_t* xsum, int32_t* y) {
    const int64_t nblk = rb / kVB;
    const int64_t ahead = prefetch_distance(rb, R);
    const VI three = Vec::set1_8(3);
    VI acc[R][NB][2];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) acc[r][b][0] = acc[r][b][1] = Vec::zero();
    for (int64_t blk = 0; blk < nblk; ++blk) {
      for (int r = 0; r < R; ++r) {
        VI q[4];
        decode(w + r * rb + blk * kVB, three, q, ahead);
        for (int b = 0; b < NB; ++b) {
          const int8_t* xb = x + b * a->xq_stride + blk * kCols;
          acc[r][b][0] = _mm512_dpbusd_epi32(acc[r][b][0], q[0], Vec::load(xb));
          acc[r][b][1] = _mm512_dpbusd_epi32(acc[r][b][1], q[1], Vec::load(xb + kVB));
          acc[r][b][0] = _mm512_dpbusd_epi32(acc[r][b][0], q[2], Vec::load(xb + 2 * kVB));
          acc[r][b][1] = _mm512_dpbusd_epi32(acc[r][b][1], q[3], Vec::load(xb + 3 * kVB));
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b)
        y[b * a->ldy + r] = Vec::hsum32(Vec::add32(acc[r][b][0], acc[r][b][1])) - xsum[b];
  }

  template <int R, int NB>
  static void rows_kernel(const I8Args* a, const uint8_t* w, int64_t rb, const int8_t* x,
                          const int32_t* xsum, int32_t* y) {
    const int64_t nblk = rb / kVB;
    const int64_t ahead = prefetch_distance(rb, R);
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
          decode(w + r * rb + blk * kVB, three, q, ahead);
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
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) y[b * a->ldy + r] = Vec::hsum32(acc[r][b]) - xsum[b];
  }

  template <int R, int NB, bool DP = false>
  static void rows_loop(const I8Args* a, int64_t b0) {
    const int64_t rb = row_bytes(a->k);
    const uint8_t* w = static_cast<const uint8_t*>(a->w);
    const int8_t* x = a->xq + b0 * a->xq_stride;
    const int32_t* xsum = a->xsum + b0;
    int32_t* y = a->y + b0 * a->ldy;
    Base::template row_groups<R>(a->rows, [&](auto n, int64_t r) {
      if constexpr (DP)
        rows_kernel_dp<decltype(n)::value, NB>(a, w + r * rb, rb, x, xsum, y + r);
      else
        rows_kernel<decltype(n)::value, NB>(a, w + r * rb, rb, x, xsum, y + r);
    });
  }
};

template <class Vec, bool kVnni = false>
constexpr I8Ukernel q2b_ukernel(const char* name) {
  return Q2b<Vec, kVnni>::ukernel(name, Vec::kBits == 512 ? "q2b256" : "q2b128");
}

}  // namespace
}  // namespace cpukern::ternary
