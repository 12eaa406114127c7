// The b3p5 int8 micro-kernel (5 trits per byte, layouts.h), for AVX2 (b3p5c160, ymm) and
// AVX-512BW (b3p5c320, zmm). The including file defines B3P5_NAME, B3P5_NAME_STR, B3P5_BITS
// (256 or 512) and optionally B3P5_VNNI (512 only: vpdpbusd at batch 1).
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
// thread, cold too (README): the rows using it are selectable, not the default.
// The last block may run past the zero-padded activations (kpad is a multiple of 256, a
// block 160 or 320 columns): it reads a zero-padded local copy instead.
#include <algorithm>
#include <cstring>

#include "kernels/common/simd_x86.h"
#define INT8_VEC_BITS B3P5_BITS
#include "kernels/ternary/ukernels/int8_vec_x86.h"
#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

#ifndef B3P5_VNNI
#define B3P5_VNNI 0
#endif

namespace cpukern::ternary {
namespace {

#if B3P5_BITS == 512 && defined(CPUKERN_SIMDE)
// Wrapping byte adds: SIMDe adds int8 lanes as signed char, where wrapping is undefined
// behaviour in C (UBSan stops the test), so the SIMDe build adds unsigned bytes instead.
inline VI v_add8(VI a, VI b) {
  uint8_t x[sizeof(VI)], y[sizeof(VI)];
  std::memcpy(x, &a, sizeof(VI));
  std::memcpy(y, &b, sizeof(VI));
  for (size_t i = 0; i < sizeof(VI); ++i) x[i] = uint8_t(x[i] + y[i]);
  std::memcpy(&a, x, sizeof(VI));
  return a;
}
#elif B3P5_BITS == 512
inline VI v_add8(VI a, VI b) { return _mm512_add_epi8(a, b); }
#endif
#if B3P5_BITS == 512
// t = [s > lo] + [s > hi] with mask registers.
inline VI v_trit(VI s, VI lo, VI hi, VI one) {
  const auto k1 = _mm512_cmpgt_epi8_mask(s, lo), k2 = _mm512_cmpgt_epi8_mask(s, hi);
  const VI t = _mm512_maskz_mov_epi8(k1, one);
  return _mm512_mask_add_epi8(t, k2, t, one);
}
#else
inline VI v_add8(VI a, VI b) { return _mm256_add_epi8(a, b); }
// t = [s > lo] + [s > hi] = |mask1 + mask2|.
inline VI v_trit(VI s, VI lo, VI hi, VI) {
  return _mm256_abs_epi8(_mm256_add_epi8(_mm256_cmpgt_epi8(s, lo), _mm256_cmpgt_epi8(s, hi)));
}
#endif

constexpr int64_t kVB = B3P5_BITS / 8;  // stored bytes per block = columns per digit
constexpr int64_t kCols = 5 * kVB;      // columns per block
constexpr int64_t kI16Blocks = 8;       // blocks summed in int16 before widening

int64_t row_bytes(int64_t k) { return layouts::b3p5_row_bytes(k, kCols); }
int64_t packed_size(int64_t m, int64_t k) { return m * row_bytes(k); }

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

#if B3P5_VNNI
// VNNI: vpdpbusd(acc, t, x) sums 4 byte products into int32 lanes (no int16 stage), batch 1.
template <int R>
inline void rows_kernel_dp(const uint8_t* w, int64_t rb, const XBlocks& xb, int32_t xsum,
                           int32_t* y) {
  const int64_t nblk = rb / kVB;
  const VI lo = v_set1_8(-43), hi = v_set1_8(42), one = v_set1_8(1);
  VI acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = v_zero();
  for (int64_t blk = 0; blk < nblk; ++blk) {
    const int8_t* x = xb.at(blk, 0);
    for (int r = 0; r < R; ++r) {
      VI s = v_load(w + r * rb + blk * kVB);
      prefetch_ahead(w + r * rb + blk * kVB);
      for (int d = 0; d < 5; ++d) {
        if (d) s = v_add8(v_add8(s, s), s);
        acc[r][d & 1] = _mm512_dpbusd_epi32(acc[r][d & 1], v_trit(s, lo, hi, one), v_load(x + d * kVB));
      }
    }
  }
  for (int r = 0; r < R; ++r) y[r] = v_hsum32(v_add32(acc[r][0], acc[r][1])) - xsum;
}
#endif

// Hides a constant's value from the compiler: GCC rewrites s > -43 as s >= -42 and, AVX2
// having no vpcmpgeb, as vpminsb + vpcmpeqb (one op more per digit).
inline VI opaque(VI v) {
#if !defined(CPUKERN_SIMDE) && defined(__GNUC__)
  asm("" : "+v"(v));
#endif
  return v;
}

template <int R, int NB>
inline void rows_kernel(const uint8_t* w, int64_t rb, const XBlocks& xb, const int32_t* xsum,
                        int32_t* y, int64_t ldy) {
  const int64_t nblk = rb / kVB;
  const VI lo = opaque(v_set1_8(-43)), hi = opaque(v_set1_8(42)), one = v_set1_8(1),
           ones16 = v_set1_16(1);
  VI acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) acc[r][b] = v_zero();
  for (int64_t b0 = 0; b0 < nblk; b0 += kI16Blocks) {
    const int64_t b1 = std::min(nblk, b0 + kI16Blocks);
    VI s16[R][NB];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) s16[r][b] = v_zero();
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int8_t* x[NB];
      for (int b = 0; b < NB; ++b) x[b] = xb.at(blk, b);
      // Digit-major: one activation vector per digit serves every row (registers: R states,
      // R x NB int16 sums, the constants).
      VI s[R];
      for (int r = 0; r < R; ++r) {
        s[r] = v_load(w + r * rb + blk * kVB);
        prefetch_ahead(w + r * rb + blk * kVB);
      }
      for (int d = 0; d < 5; ++d) {
        VI xv[NB];
        for (int b = 0; b < NB; ++b) xv[b] = v_load(x[b] + d * kVB);
        for (int r = 0; r < R; ++r) {
          if (d) s[r] = v_add8(v_add8(s[r], s[r]), s[r]);
          const VI t = v_trit(s[r], lo, hi, one);
          // (opaque: else GCC delays the adds and spills the products)
          for (int b = 0; b < NB; ++b) s16[r][b] = opaque(v_add16(s16[r][b], v_maddubs(t, xv[b])));
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < NB; ++b) acc[r][b] = v_add32(acc[r][b], v_madd16(s16[r][b], ones16));
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NB; ++b) y[b * ldy + r] = v_hsum32(acc[r][b]) - xsum[b];
}

template <int R, int NB, bool DP = false>
inline void rows_loop(const I8Args* a, int64_t b0) {
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
  int64_t r = 0;
#if B3P5_VNNI
  if (DP) {
    for (; r + R <= a->rows; r += R) rows_kernel_dp<R>(w + r * rb, rb, xb, xsum[0], y + r);
    for (; r < a->rows; ++r) rows_kernel_dp<1>(w + r * rb, rb, xb, xsum[0], y + r);
    return;
  }
#endif
  for (; r + R <= a->rows; r += R) rows_kernel<R, NB>(w + r * rb, rb, xb, xsum, y + r, a->ldy);
  for (; r < a->rows; ++r) rows_kernel<1, NB>(w + r * rb, rb, xb, xsum, y + r, a->ldy);
}

void run(const I8Args* a) {
  int64_t b = 0;
  for (; b + 4 <= a->batch; b += 4) rows_loop<2, 4>(a, b);
  switch (a->batch - b) {
    case 3: rows_loop<2, 3>(a, b); break;
    case 2: rows_loop<2, 2>(a, b); break;
    case 1: rows_loop<4, 1, bool(B3P5_VNNI)>(a, b); break;
    default: break;
  }
}

}  // namespace

const I8Ukernel B3P5_NAME = {B3P5_NAME_STR, B3P5_BITS == 512 ? "b3p5c320" : "b3p5c160", 4,
                             packed_size, row_bytes, run};

}  // namespace cpukern::ternary
