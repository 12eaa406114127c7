// W4A8 (WeightFormat::kMxfp4A8): MXFP4 expert weights, int8 activations. The arithmetic, the
// packings and the GEMM loop are written once here; a micro-kernel file gives only a register
// tile by traits (make_w4a8_ukernel<T>), like the int8 tiles of gemm_loop.h.
//
// The arithmetic (every variant gives these bits; the scalar tile is the oracle):
//  1. A row: qa = int8::quantize_row(x) (the W8A8 bytes), scale sa (0: zero row; NaN: a row
//     holding inf or NaN, whose outputs are NaN).
//  2. A weight: w2 = 2 * e2m1(code), an integer in [-12, 12] (code 8, -0, is 0); its value is
//     w2 * 2**(e - 128) for its block's scale byte e.
//  3. Per (row r, column c, block b of 32 k): isum = sum qa[k] * w2[c][k], an exact int32
//     (|isum| <= 32 * 127 * 12 = 48768, so float(isum) is exact too).
//  4. Pack time, per column: E = max_b e[c][b]; per block rel = max(0, 127 - (E - e[c][b])) and
//     mult = the fp32 of bits rel << 23 = 2**(e - E), or 0 for a block more than 2**126 below
//     the column's largest (flushed); ws_c = 2**(E - 128) (fp32, subnormal for E < 2).
//  5. acc = 0.0f; for b in increasing order: acc = fmaf(float(isum_b), mult_b, acc) (a fused
//     multiply-add on every ISA). |acc| <= (k / 32) * 48768: no overflow.
//  6. v = float(double(acc) * double(sa) * double(ws_c)) (both products exact in double: one
//     rounding), then C = v, or C + v (fp32) when accumulating.
// Error bound against the exact sum S = sum_k w_k x_k (the derivation in docs/formats/mxfp4.md,
// "W4A8"): with a_k = sa * qa_k (|x_k - a_k| <= sa / 2; exact when the row is 0), T_b the exact
// block terms sum_k w_k a_k and F the columns' flushed blocks,
//   |C - S| <= (sa / 2) sum_k |w_k| + ((nb + 1) * 2**-24) sum_b |T_b| + sum_{b in F} |T_b|
//             + (fp32's smallest subnormal, 2**-149, for the final rounding's underflow),
// nb = k / 32 (each of the nb FMAs rounds once, relative 2**-24 of a partial sum, and the
// epilogue once more).
//
// Tile traits T (W4a8TileDefaults gives the defaults):
//   kMR, kNR, kNP, kActW, rows(rem)   as for the int8 tiles (gemm_loop.h); kNR columns per panel
//   A, a_stride(k), kARows, put_a(q, k, r, rows, lda)   the packed A rows, as for the int8 tiles
//                      (default: row-major int8, a_stride = k)
//   kWOffset           the tile multiplies by u = w2 + kWOffset (x86 vpdpbusd / vpmaddubsw take
//                      unsigned weights: kWOffset = 12, u in [0, 24]); pack_a then stores per
//                      row and block corr = -kWOffset * sum_{k in block} qa[k], so that
//                      isum = corr + sum qa * u (exact integers: the same isum). 0: corr = 0.
//   nibble(col, kk)    where weight (col, kk), kk < 32, of a block lies in the block's 16 * kNR
//                      code bytes: byte nibble / 2, the high nibble when odd. Codes are stored
//                      as they are (e2m1, 4 bits); the tile decodes them (one lookup per 16 or
//                      32 weights: vpshufb / tbl).
//   tile<M>(a, lda, corr, ldcorr, nb, rel, codes, panel, np, acc, ldacc)
//                      acc[r * ldacc + j * kNR + c] = step 5's acc for r < M, j < np <= kNP,
//                      c < kNR: row r's A at a + r * lda, its corrections corr[r * ldcorr + b];
//                      panel j's rel bytes at rel + j * panel (block b's kNR bytes at b * kNR)
//                      and its codes at codes + j * panel (block b's at b * 16 * kNR).
//                      The int32 block sums may be split and reordered freely (exact); the fp32
//                      chain over blocks may not (batch invariance: one chain per element).
// Layouts:
//   packed weights, per panel of kNR columns: kNR fp32 ws (0 past o); nb * kNR rel bytes
//     (block-major); zero padding to a multiple of 64 bytes; nb blocks of 16 * kNR code bytes
//     (columns past o: code 0 and rel 0).
//   packed A: round_up(m, 16) fp32 sa; round_up(m, kARows) * nb int32 corr (rounded up to 64
//     bytes); round_up(m, kARows) rows of a_stride(k) A elements.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/int8.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {
namespace {  // internal linkage: compiled per ISA

struct W4a8TileDefaults : TileDefaults {
  static constexpr WeightFormat kFormat = WeightFormat::kMxfp4A8;
  static constexpr int kWOffset = 0;
  using A = int8_t;
  static int64_t a_stride(int64_t k) { return k; }
  static void put_a(const int8_t* q, int64_t k, int64_t r, int8_t* rows, int64_t lda) {
    std::memcpy(rows + r * lda, q, size_t(k));
    std::memset(rows + r * lda + k, 0, size_t(lda - k));
  }
};

// The fp32 block multiplier of a rel byte (step 4): 2**(rel - 127), 0 for rel = 0.
inline float w4a8_mult(uint8_t rel) {
  const uint32_t bits = uint32_t(rel) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

template <class T>
int64_t w4a8_codes_offset(int64_t nb) {
  return round_up(T::kNR * int64_t(sizeof(float)) + nb * T::kNR, 64);
}
template <class T>
int64_t w4a8_panel_bytes(int64_t k) {
  const int64_t nb = k / mxfp4::kBlock;
  return w4a8_codes_offset<T>(nb) + nb * mxfp4::kBlockBytes * T::kNR;
}
template <class T>
int64_t w4a8_packed_size(int64_t o, int64_t i) {
  return round_up(o, T::kNR) / T::kNR * w4a8_panel_bytes<T>(i);
}

template <class T>
void w4a8_pack(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t i, void* dst) {
  const int64_t nb = i / mxfp4::kBlock, pb = w4a8_panel_bytes<T>(i);
  const int64_t panels = round_up(o, T::kNR) / T::kNR, cb = mxfp4::kBlockBytes * T::kNR;
  uint8_t* d = static_cast<uint8_t*>(dst);
  std::memset(d, 0, size_t(panels * pb));
  for (int64_t p = 0; p < panels; ++p) {
    uint8_t* dp = d + p * pb;
    uint8_t* rel = dp + T::kNR * sizeof(float);
    uint8_t* codes = dp + w4a8_codes_offset<T>(nb);
    for (int c = 0; c < T::kNR; ++c) {
      const int64_t n = p * T::kNR + c;
      if (n >= o) continue;  // zero weights, ws = 0
      const uint8_t* e = scales + n * nb;
      const int emax = *std::max_element(e, e + nb);
      const float ws = std::ldexp(1.0f, emax - 128);  // exact, subnormal for emax < 2
      std::memcpy(dp + c * sizeof(float), &ws, sizeof(float));
      for (int64_t b = 0; b < nb; ++b) {
        rel[b * T::kNR + c] = uint8_t(std::max(0, 127 - (emax - int(e[b]))));
        const uint8_t* src = blocks + (n * nb + b) * mxfp4::kBlockBytes;
        uint8_t* cdst = codes + b * cb;
        for (int kk = 0; kk < mxfp4::kBlock; ++kk) {
          const int code = (src[kk / 2] >> (4 * (kk & 1))) & 0xf;
          const int at = T::nibble(c, kk);
          cdst[at / 2] |= uint8_t(code << (4 * (at & 1)));
        }
      }
    }
  }
}

template <class T>
int64_t w4a8_corr_bytes(int64_t m, int64_t k) {
  return round_up(round_up(m, T::kARows) * (k / mxfp4::kBlock) * int64_t(sizeof(int32_t)), 64);
}
template <class T>
int64_t w4a8_packed_a_size(int64_t m, int64_t k) {
  return int8_a_header(m) + w4a8_corr_bytes<T>(m, k) +
         round_up(m, T::kARows) * T::a_stride(k) * int64_t(sizeof(typename T::A));
}

template <class T>
void w4a8_pack_a(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k,
                 void* dst) {
  using A = typename T::A;
  const int64_t nb = k / mxfp4::kBlock;
  char* base = static_cast<char*>(dst);
  float* sa = reinterpret_cast<float*>(base);
  int32_t* corr = reinterpret_cast<int32_t*>(base + int8_a_header(m));
  A* out = reinterpret_cast<A*>(base + int8_a_header(m) + w4a8_corr_bytes<T>(m, k));
  static thread_local std::vector<int8_t> q;  // one row (the scale needs its amax first)
  q.assign(size_t(k), int8_t(0));
  for (int64_t r = 0; r < round_up(m, T::kARows); ++r) {
    if (r < m)
      sa[r] = int8::quantize_row(a + (rows ? int64_t(rows[r]) : r) * lda, k, q.data());
    else
      std::fill(q.begin(), q.end(), int8_t(0));
    for (int64_t b = 0; b < nb; ++b) {
      int32_t s = 0;
      for (int kk = 0; kk < mxfp4::kBlock; ++kk) s += q[size_t(b * mxfp4::kBlock + kk)];
      corr[r * nb + b] = -T::kWOffset * s;
    }
    T::put_a(q.data(), k, r, out, T::a_stride(k));
  }
  for (int64_t r = m; r < round_up(m, 16); ++r) sa[r] = 0.0f;
}

template <class T>
void w4a8_gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0, int64_t p1,
               float* c, int64_t ldc, bool accumulate) {
  const int64_t nb = k / mxfp4::kBlock, lda = T::a_stride(k);
  const char* base = static_cast<const char*>(a_packed);
  const float* sa = reinterpret_cast<const float*>(base);
  const int32_t* corr = reinterpret_cast<const int32_t*>(base + int8_a_header(m));
  const auto* a = reinterpret_cast<const typename T::A*>(base + int8_a_header(m) +
                                                         w4a8_corr_bytes<T>(m, k));
  const int64_t pb = w4a8_panel_bytes<T>(k), coff = w4a8_codes_offset<T>(nb);
  // Step 6 is scaled_panels' epilogue.
  scaled_panels<T, float>(
      m, sa, static_cast<const char*>(w), pb, p0, p1, c, ldc, accumulate,
      [&](int64_t r, int64_t mb, const char* wp, int np, float* acc, int64_t ncol) {
        const uint8_t* wu = reinterpret_cast<const uint8_t*>(wp);
        tile_rows<T>(mb, a + r * lda, lda, corr + r * nb, nb, nb, wu + T::kNR * sizeof(float),
                     wu + coff, pb, np, acc, ncol);
      });
}

// W4A8's pack function (Ukernel::pack): the MXFP4 blocks and scales of ExpertWeights.
template <class T>
void pack_w4a8(const ExpertWeights& w, int64_t o, int64_t i, void* dst) {
  w4a8_pack<T>(static_cast<const uint8_t*>(w.values), static_cast<const uint8_t*>(w.scales), o,
               i, dst);
}

// The Ukernel of W4A8 tile traits T.
template <class T>
constexpr Ukernel make_w4a8_ukernel(const char* name, const char* layout) {
  static_assert(T::kFormat == WeightFormat::kMxfp4A8);
  return {name,           layout,       T::kMR,        T::kNR,
          mxfp4::kBlock,  w4a8_packed_size<T>, pack_w4a8<T>, w4a8_packed_a_size<T>,
          w4a8_pack_a<T>, w4a8_gemm<T>, activation<T>, T::kFormat};
}

}  // namespace cpukern::moe
