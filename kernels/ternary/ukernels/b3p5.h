// The b3p5 int8 micro-kernel (5 trits per byte, layouts.h), for AVX2 (b3p5c160, ymm) and
// AVX-512BW (b3p5c320, zmm): b3p5_ukernel<Vec, kVnni>(name), Vec one of int8_vec_x86.h's
// traits, kVnni (zmm only) vpdpbusd at batch 1. Each micro-kernel file instantiates it once.
//
// Decode, per vector of stored bytes s (biased: s = b ^ 0x80 as int8): digit 0 is
// t = [s > -43] + [s > 42]; then s = 3 s (two byte adds; the bias survives, layouts.h) for
// the next digit. Why this and not the alternatives: 16-bit multiplies (vpmullw/vpmulhuw
// on even and odd bytes) cost 6+ ops per digit and compete with vpmaddubsw for the
// multiply ports; a pshufb table cannot split a base-3 byte into nibbles. Here a digit is
// 2 adds + 2 compares + 2 subtracts, all on the simple-ALU ports, and vpmaddubsw(t, x)
// (|pair| <= 508) sums 5 digits x 8 blocks in int16 (<= 20320) before vpmaddwd widens.
// sum_j w_j x_j = sum_j t_j x_j - sum_j x_j (the driver's xsum).
// Cost (llvm-mca 19, znver3, batch 1): 38 cycles per 4 rows x 160 columns, all four vector
// pipes busy (q2b128: 15 per 4 x 128), so on Zen 3 this is slower than q2b hot and, at one
// thread, cold too (docs/performance/ternary.md): its rows are catalogue only.
// The last block may run past the zero-padded activations (kpad is a multiple of 256, a
// block 160 or 320 columns): it reads a zero-padded local copy instead.
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
struct B3p5 : Int8Blocks<B3p5<Vec, kVnni>, Vec, 5, kVnni> {
  using Base = Int8Blocks<B3p5, Vec, 5, kVnni>;
  using typename Base::VI;
  using Base::kCols, Base::kI16Blocks, Base::kVB;  // kVB: also columns per digit

  static int64_t row_bytes(int64_t k) { return layouts::b3p5_row_bytes(k, kCols); }

  // Where block `blk` of batch row b reads its activations.
  struct XBlocks {
    const int8_t* x;     // the shared buffer, batch rows xs apart
    int64_t xs;
    int64_t nfull;       // blocks [0, nfull) lie inside it
    const int8_t* tail;  // the last block (if nfull < nblk): kCols bytes per batch row
    const int8_t* at(int64_t blk, int b) const {
      return blk < nfull ? x + b * xs + blk * kCols : tail + b * kCols;
    }
  };

  // VNNI: vpdpbusd(acc, t, x) sums 4 byte products into int32 lanes (no int16 stage), batch 1.
  template <int R>
  static void rows_kernel_dp(const uint8_t* w, int64_t rb, const XBlocks& xb, int32_t xsum,
                             int32_t* y) {
    const int64_t nblk = rb / kVB;
    const VI lo = Vec::set1_8(-43), hi = Vec::set1_8(42), one = Vec::set1_8(1);
    VI acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = Vec::zero();
    for (int64_t blk = 0; blk < nblk; ++blk) {
      const int8_t* x = xb.at(blk, 0);
      for (int r = 0; r < R; ++r) {
        VI s = Vec::load(w + r * rb + blk * kVB);
        prefetch_ahead(w + r * rb + blk * kVB);
        for (int d = 0; d < 5; ++d) {
          if (d) s = Vec::add8(Vec::add8(s, s), s);
          acc[r][d & 1] = _mm512_dpbusd_epi32(acc[r][d & 1], Vec::trit(s, lo, hi, one),
                                              Vec::load(x + d * kVB));
        }
      }
    }
    for (int r = 0; r < R; ++r) y[r] = Vec::hsum32(Vec::add32(acc[r][0], acc[r][1])) - xsum;
  }

  // Hides a constant's value from the compiler: GCC rewrites s > -43 as s >= -42 and, AVX2
  // having no vpcmpgeb, as vpminsb + vpcmpeqb (one op more per digit).
  static VI opaque(VI v) {
#if !defined(CPUKERN_SIMDE) && defined(__GNUC__)
    asm("" : "+v"(v));
#endif
    return v;
  }

  template <int R, int NB>
  static void rows_kernel(const uint8_t* w, int64_t rb, const XBlocks& xb, const int32_t* xsum,
                          int32_t* y, int64_t ldy) {
    const int64_t nblk = rb / kVB;
    const VI lo = opaque(Vec::set1_8(-43)), hi = opaque(Vec::set1_8(42)), one = Vec::set1_8(1),
             ones16 = Vec::set1_16(1);
    VI acc[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) acc[r][b] = Vec::zero();
    for (int64_t b0 = 0; b0 < nblk; b0 += kI16Blocks) {
      const int64_t b1 = std::min(nblk, b0 + kI16Blocks);
      VI s16[R][NB];
      for (int r = 0; r < R; ++r)
        for (int b = 0; b < NB; ++b) s16[r][b] = Vec::zero();
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int8_t* x[NB];
        for (int b = 0; b < NB; ++b) x[b] = xb.at(blk, b);
        // Digit-major: one activation vector per digit serves every row (registers: R states,
        // R x NB int16 sums, the constants).
        VI s[R];
        for (int r = 0; r < R; ++r) {
          s[r] = Vec::load(w + r * rb + blk * kVB);
          prefetch_ahead(w + r * rb + blk * kVB);
        }
        for (int d = 0; d < 5; ++d) {
          VI xv[NB];
          for (int b = 0; b < NB; ++b) xv[b] = Vec::load(x[b] + d * kVB);
          for (int r = 0; r < R; ++r) {
            if (d) s[r] = Vec::add8(Vec::add8(s[r], s[r]), s[r]);
            const VI t = Vec::trit(s[r], lo, hi, one);
            // (opaque: else GCC delays the adds and spills the products)
            for (int b = 0; b < NB; ++b)
              s16[r][b] = opaque(Vec::add16(s16[r][b], Vec::maddubs(t, xv[b])));
          }
        }
      }
      for (int r = 0; r < R; ++r)
        for (int b = 0; b < NB; ++b)
          acc[r][b] = Vec::add32(acc[r][b], Vec::madd16(s16[r][b], ones16));
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) y[b * ldy + r] = Vec::hsum32(acc[r][b]) - xsum[b];
  }

  template <int R, int NB, bool DP = false>
  static void rows_loop(const I8Args* a, int64_t b0) {
    const int64_t rb = row_bytes(a->k), nblk = rb / kVB;
    const uint8_t* w = static_cast<const uint8_t*>(a->w);
    // Blocks wholly inside the zero-padded activations; the rest (at most the last) is copied.
    XBlocks xb{a->xq + b0 * a->xq_stride, a->xq_stride, std::min(nblk, i8_kpad(a->k) / kCols),
               nullptr};
    alignas(64) int8_t tail[NB][kCols];
    if (xb.nfull < nblk) {
      const int64_t have = i8_kpad(a->k) - xb.nfull * kCols;  // < kCols
      for (int b = 0; b < NB; ++b) {
        std::memcpy(tail[b], xb.x + b * xb.xs + xb.nfull * kCols, size_t(have));
        std::memset(tail[b] + have, 0, size_t(kCols - have));
      }
      xb.tail = &tail[0][0];
    }
    const int32_t* xsum = a->xsum + b0;
    int32_t* y = a->y + b0 * a->ldy;
    Base::template row_groups<R>(a->rows, [&](auto n, int64_t r) {
      if constexpr (DP)
        rows_kernel_dp<decltype(n)::value>(w + r * rb, rb, xb, xsum[0], y + r);
      else
        rows_kernel<decltype(n)::value, NB>(w + r * rb, rb, xb, xsum, y + r, a->ldy);
    });
  }
};

template <class Vec, bool kVnni = false>
constexpr I8Ukernel b3p5_ukernel(const char* name) {
  return B3p5<Vec, kVnni>::ukernel(name, Vec::kBits == 512 ? "b3p5c320" : "b3p5c160");
}

}  // namespace
}  // namespace cpukern::ternary
