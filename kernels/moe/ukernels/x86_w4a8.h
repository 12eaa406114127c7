// The x86 W4A8 register tiles (w4a8_loop.h): exact int32 block sums of int8 activations times
// MXFP4 weights decoded by one vpshufb per 32 (ymm) or 64 (zmm) weights, then one fp32 FMA per
// block with the block multiplier. Written once over the vector traits V:
//   Zmm      AVX-512 VNNI, vpdpbusd on zmm (16 columns per vector)
//   ZmmBw    AVX-512 BW without VNNI, vpmaddubsw + vpmaddwd on zmm
//   YmmVnni  AVX-VNNI, vpdpbusd on ymm (two vectors per 16 columns)
//   YmmAvx2  AVX2, vpmaddubsw + vpmaddwd (two vectors per 16 columns)
// vpdpbusd and vpmaddubsw multiply unsigned by signed bytes: the weights decode to
// u = w2 + 12 in [0, 24] (unsigned), the activations stay signed, and pack_a's per-block
// correction -12 * sum(qa) starts each block's sum (kWOffset = 12). vpmaddubsw saturates at
// int16: |u0 a0 + u1 a1| <= 2 * 24 * 127 = 6096, and the sum of two such (two k steps, added
// with vpaddw before vpmaddwd) 12192, far from it.
// Layout "mxfp4a8p16x4": per block of 32 k and panel of 16 columns, 4 chunks of 64 bytes; in
// chunk t, byte 4 col + q holds weight (col, k = 8t + q) in its low nibble and (col, 8t + 4 + q)
// in its high nibble: each nibble plane is one k step of 16 columns x 4 k, the operand order of
// vpdpbusd (an int32 lane = a column's 4 k), and a ymm takes the chunk's 8-column halves.
#pragma once
#include "kernels/common/simd_x86.h"

#include <cstdint>
#include <cstring>

#include "kernels/common/unroll.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/w4a8_loop.h"

namespace cpukern::moe::x86_w4a8 {
namespace {  // internal linkage: compiled per ISA

// u = 2 * e2m1(code) + 12 per code, the vpshufb table (code 8, -0, is 12: w2 = 0), once per
// 128-bit lane of a zmm (vpshufb looks up within each lane).
struct Lut {
  alignas(64) uint8_t b[64];
  constexpr Lut() : b{} {
    for (int i = 0; i < 64; ++i) b[i] = uint8_t(mxfp4::kTwice[i % 16] + 12);
  }
};
inline constexpr Lut kLut{};

#if defined(__AVX512BW__) || defined(CPUKERN_SIMDE)
// The zmm forms share everything but the dot product (Dot: ZmmVnniDot, ZmmBwDot below).
template <class Dot>
struct ZmmOf {
  using I = __m512i;
  using F = __m512;
  static constexpr int kLanes = 16;
  static constexpr bool kSplit = Dot::kSplit;
  static I zero() { return _mm512_setzero_si512(); }
  static F fzero() { return _mm512_setzero_ps(); }
  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I lut() { return _mm512_load_si512(kLut.b); }
  static I mask() { return _mm512_set1_epi8(0x0f); }
  static I load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I lo(I raw, I lut, I m) { return _mm512_shuffle_epi8(lut, _mm512_and_si512(raw, m)); }
  static I hi(I raw, I lut, I m) {
    return _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m));
  }
  static void dot2(I& c0, I& c1, I wlo, I whi, I ae, I ao) { Dot::dot2(c0, c1, wlo, whi, ae, ao); }
  static I add(I x, I y) { return _mm512_add_epi32(x, y); }
#if defined(CPUKERN_SIMDE)
  // SIMDe 0.7.4 has neither vpmovzxbd nor vcvtdq2ps on zmm: element loops (tests only).
  static F mult(const uint8_t* rel) {
    alignas(64) uint32_t b[16];
    for (int i = 0; i < 16; ++i) b[i] = uint32_t(rel[i]) << 23;
    return _mm512_castsi512_ps(_mm512_load_si512(b));
  }
  static F fma(I s, F m, F acc) {
    alignas(64) int32_t v[16];
    alignas(64) float f[16];
    _mm512_store_si512(v, s);
    for (int i = 0; i < 16; ++i) f[i] = float(v[i]);
    return _mm512_fmadd_ps(_mm512_load_ps(f), m, acc);
  }
#else
  // 16 rel bytes -> fp32 bits rel << 23. The maskz forms: GCC 12's plain ones pass an
  // undefined vector through (-Wmaybe-uninitialized; the same instructions).
  static F mult(const uint8_t* rel) {
    return _mm512_castsi512_ps(cpukern_slli_epi32(
        _mm512_maskz_cvtepu8_epi32(__mmask16(0xFFFF),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(rel))),
        23));
  }
  static F fma(I s, F m, F acc) {
    return _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(__mmask16(0xFFFF), s), m, acc);
  }
#endif
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
};

// Two k steps in int16 (vpmaddubsw each, one vpaddw; at most 12192, above), then vpmaddwd with
// ones to int32: Avx2Dot on zmm.
struct ZmmBwDot {
  static constexpr bool kSplit = false;  // one vpaddd per two k steps: no long chain
  static void dot2(__m512i& c0, __m512i&, __m512i wlo, __m512i whi, __m512i ae, __m512i ao) {
    const __m512i s16 =
        _mm512_add_epi16(_mm512_maddubs_epi16(wlo, ae), _mm512_maddubs_epi16(whi, ao));
    c0 = _mm512_add_epi32(c0, _mm512_madd_epi16(s16, _mm512_set1_epi16(1)));
  }
};
using ZmmBw = ZmmOf<ZmmBwDot>;
#endif

#if defined(__AVX512VNNI__) || defined(CPUKERN_SIMDE)
struct ZmmVnniDot {
  static constexpr bool kSplit = true;  // two sum chains per accumulator when few rows
  static void dot2(__m512i& c0, __m512i& c1, __m512i wlo, __m512i whi, __m512i ae, __m512i ao) {
    c0 = _mm512_dpbusd_epi32(c0, wlo, ae);
    c1 = _mm512_dpbusd_epi32(c1, whi, ao);
  }
};
using Zmm = ZmmOf<ZmmVnniDot>;
#endif

// The ymm forms share everything but the dot product.
template <class Dot>
struct Ymm {
  using I = __m256i;
  using F = __m256;
  static constexpr int kLanes = 8;
  static constexpr bool kSplit = Dot::kSplit;
  static I zero() { return _mm256_setzero_si256(); }
  static F fzero() { return _mm256_setzero_ps(); }
  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I lut() { return _mm256_load_si256(reinterpret_cast<const __m256i*>(kLut.b)); }
  static I mask() { return _mm256_set1_epi8(0x0f); }
  static I load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I lo(I raw, I lut, I m) { return _mm256_shuffle_epi8(lut, _mm256_and_si256(raw, m)); }
  static I hi(I raw, I lut, I m) {
    return _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m));
  }
  static void dot2(I& c0, I& c1, I wlo, I whi, I ae, I ao) { Dot::dot2(c0, c1, wlo, whi, ae, ao); }
  static I add(I x, I y) { return _mm256_add_epi32(x, y); }
  static F mult(const uint8_t* rel) {  // 8 rel bytes
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rel))), 23));
  }
  static F fma(I s, F m, F acc) { return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), m, acc); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
};

#if defined(__AVXVNNI__) || defined(CPUKERN_SIMDE)
struct VnniDot {
  static constexpr bool kSplit = true;
  static void dot2(__m256i& c0, __m256i& c1, __m256i wlo, __m256i whi, __m256i ae, __m256i ao) {
#if defined(CPUKERN_SIMDE)
    c0 = _mm256_dpbusd_epi32(c0, wlo, ae);
    c1 = _mm256_dpbusd_epi32(c1, whi, ao);
#else
    c0 = _mm256_dpbusd_avx_epi32(c0, wlo, ae);
    c1 = _mm256_dpbusd_avx_epi32(c1, whi, ao);
#endif
  }
};
using YmmVnni = Ymm<VnniDot>;
#endif

// Two k steps in int16 (vpmaddubsw each, one vpaddw), then vpmaddwd with ones to int32.
struct Avx2Dot {
  static constexpr bool kSplit = false;  // one vpaddd per two k steps: no long chain
  static void dot2(__m256i& c0, __m256i&, __m256i wlo, __m256i whi, __m256i ae, __m256i ao) {
    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(wlo, ae), _mm256_maddubs_epi16(whi, ao));
    c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
  }
};
using YmmAvx2 = Ymm<Avx2Dot>;

inline int32_t load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// acc[M][NP * 16] = the block chains of M rows x NP panels (w4a8_loop.h, tile<M>).
template <class V, int M, int NP>
inline void tile(const int8_t* a, int64_t lda, const int32_t* corr, int64_t ldcorr, int64_t nb,
                 const uint8_t* rel, const uint8_t* codes, int64_t panel, float* acc,
                 int64_t ldacc) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int NV = 16 / V::kLanes;  // vectors per panel
  // A second int32 chain per accumulator (the nibble planes) when few accumulators would leave
  // vpdpbusd latency-bound; the int32 sums are exact, so the split changes no bit.
  constexpr bool kSplit = V::kSplit && M * NP * NV < 8;
  F f[NP][M][NV];
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    CPUKERN_UNROLL for (int v = 0; v < NV; ++v) f[j][r][v] = V::fzero();
  const I lut = V::lut(), m = V::mask();
  for (int64_t b = 0; b < nb; ++b) {
    I c0[NP][M][NV], c1[NP][M][NV];
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r)
      CPUKERN_UNROLL for (int v = 0; v < NV; ++v) {
        c0[j][r][v] = V::set1(corr[r * ldcorr + b]);
        c1[j][r][v] = V::zero();
      }
    const uint8_t* cb = codes + b * (mxfp4::kBlockBytes * 16);
    const int8_t* ab = a + b * mxfp4::kBlock;
    CPUKERN_UNROLL for (int t = 0; t < 4; ++t) {
      CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
        const uint8_t* cj = cb + j * panel + t * 64;
        _mm_prefetch(reinterpret_cast<const char*>(cj) + kInt8PrefetchBytes, _MM_HINT_T0);
        CPUKERN_UNROLL for (int v = 0; v < NV; ++v) {
          const I raw = V::load(cj + v * 32);
          const I wlo = V::lo(raw, lut, m), whi = V::hi(raw, lut, m);
          CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
            const I ae = V::set1(load4(ab + r * lda + 8 * t)),
                    ao = V::set1(load4(ab + r * lda + 8 * t + 4));
            if constexpr (kSplit)
              V::dot2(c0[j][r][v], c1[j][r][v], wlo, whi, ae, ao);
            else
              V::dot2(c0[j][r][v], c0[j][r][v], wlo, whi, ae, ao);
          }
        }
      }
    }
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int v = 0; v < NV; ++v) {
      const F mult = V::mult(rel + j * panel + b * 16 + v * V::kLanes);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        const I s = kSplit ? V::add(c0[j][r][v], c1[j][r][v]) : c0[j][r][v];
        f[j][r][v] = V::fma(s, mult, f[j][r][v]);
      }
    }
  }
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    CPUKERN_UNROLL for (int v = 0; v < NV; ++v)
      V::store(acc + r * ldacc + j * 16 + v * V::kLanes, f[j][r][v]);
}

// Zmm, ZmmBw: 8 rows (8 sums + 8 fp32 chains + decode); 1 row streams 4 panels per call, 2
// rows 2. Ymm (16 registers, two vectors per 16 columns): 2 rows; 1 row streams 2 panels.
template <class V>
struct Tile : W4a8TileDefaults {
  static constexpr int kMR = V::kLanes == 16 ? 8 : 2, kNR = 16, kNP = 4, kActW = V::kLanes;
  static constexpr int kWOffset = 12;
  static int64_t rows(int64_t rem) {
    return rem <= kMR ? rem : rem < 2 * kMR ? (rem + 1) / 2 : kMR;
  }
  static int nibble(int col, int kk) {
    const int s = kk / 4;
    return 2 * ((s / 2) * 64 + col * 4 + kk % 4) + s % 2;
  }
  template <int M>
  static void tile(const int8_t* a, int64_t lda, const int32_t* corr, int64_t ldcorr, int64_t nb,
                   const uint8_t* rel, const uint8_t* codes, int64_t panel, int np, float* acc,
                   int64_t ldacc) {
    constexpr int G = V::kLanes == 16 ? (M == 1 ? 4 : M == 2 ? 2 : 1) : (M == 1 ? 2 : 1);
    panel_groups<G, 1>(np, [&](auto g, int j) {
      x86_w4a8::tile<V, M, g>(a, lda, corr, ldcorr, nb, rel + j * panel, codes + j * panel, panel,
                              acc + j * 16, ldacc);
    });
  }
};

}  // namespace
}  // namespace cpukern::moe::x86_w4a8
