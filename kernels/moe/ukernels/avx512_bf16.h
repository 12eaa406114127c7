// The AVX-512 BF16 register tile of the fused-MoE kernels (vdpbf16ps), written once over a
// weight source (bf16 pair words, or MXFP4 decoded in registers to the same words), so the
// two kernels compute the same operations on the same bf16 operands.
//
// Each 32-bit lane of a weight vector is the pair (w[col][k], w[col][k+1]); the matching A pair
// is broadcast, and one instruction accumulates both products into the column's fp32 lane.
// 8 rows x 32 columns (16 zmm accumulators). Each C element is one chain in k-pair order for
// every row count (batch-invariant); up to 4 rows (decode) cover 2-4 panels per call instead,
// for as many independent chains.
#pragma once
#include "kernels/common/simd_x86.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernels/pack_kpairs.h"

#if defined(CPUKERN_SIMDE)
// Debian's SIMDe 0.7.4 lacks these AVX-512F/BW conversions and the __mmask32 alias (the SIMDe row
// only; native builds use the instructions): portable stand-ins, exact like the instructions
// (int -> fp32 rounds to nearest even, as vcvtdq2ps under the default MXCSR).
typedef simde__mmask32 __mmask32;
// Each lane of v converted to To, as a vector of type Out.
template <class To, class From, class Out, class In>
static inline Out cpukern_convert_lanes(In v) {
  constexpr int n = int(sizeof(In) / sizeof(From));
  static_assert(sizeof(Out) == n * sizeof(To), "lane counts differ");
  From in[n];
  To out[n];
  std::memcpy(in, &v, sizeof(in));
  for (int j = 0; j < n; ++j) out[j] = To(in[j]);
  Out r;
  std::memcpy(&r, out, sizeof(r));
  return r;
}
#ifndef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(v) cpukern_convert_lanes<float, int32_t, __m512>(v)
#endif
#ifndef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32(v) cpukern_convert_lanes<int32_t, int8_t, __m512i>(v)
#endif
#ifndef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32(v) cpukern_convert_lanes<int32_t, uint8_t, __m512i>(v)
#endif
#ifndef _mm512_cvtepu8_epi16
#define _mm512_cvtepu8_epi16(v) cpukern_convert_lanes<uint16_t, uint8_t, __m512i>(v)
#endif
#endif

namespace cpukern::moe::avx512bf16 {
namespace {  // internal linkage: compiled per ISA

constexpr int kNR = 32;

// A rows stay bf16, [m][kp], zero past k.
inline void pack_a(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k,
                   void* dst) {
  const int64_t kp = round_up(k, 2);
  bf16_t* d = static_cast<bf16_t*>(dst);
  for (int64_t r = 0; r < m; ++r) {
    const bf16_t* src = a + (rows ? int64_t(rows[r]) : r) * lda;
    std::memcpy(d + r * kp, src, size_t(k) * 2);
    for (int64_t j = k; j < kp; ++j) d[r * kp + j] = 0;
  }
}

inline __m512 dp(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}
inline __m512i bcast_pair(const bf16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// bf16 weights: the panel's 32-bit words [k pair][32 columns].
struct Bf16Src {
  static constexpr int kPairsPerBlock = 0;
  const uint32_t* w;
  explicit Bf16Src(const void* p) : w(static_cast<const uint32_t*>(p)) {}
  void block(int64_t) {}
  const char* at(int64_t kk) const { return reinterpret_cast<const char*>(w + kk * kNR); }
  void pair(int64_t kk, __m512i& w0, __m512i& w1) const {
    w0 = _mm512_loadu_si512(w + kk * kNR);
    w1 = _mm512_loadu_si512(w + kk * kNR + 16);
  }
};

// MXFP4 weights ("mxfp4p32": per panel per block of 32 k, the 32 columns' scales, then per k
// pair j the 32 columns' bytes j: 544 bytes). Decoded per k pair to the bf16 pair words the
// bf16 kernel loads: vpermps looks each code's e2m1 value up as fp32 (code 8: -0), times
// 2**(s - 127) (exact) -> the high halves.
struct Mxfp4Src {
  static constexpr int kPairsPerBlock = 16, kBlockBytes = 32 + 16 * 32;
  const uint8_t* w;
  const uint8_t* blk = nullptr;
  __m512 f0, f1;  // 2**(s - 127) of columns 0-15, 16-31
  const __m512 values = _mm512_load_ps(mxfp4::kValue);
  const __m256i nib = _mm256_set1_epi8(0x0f);
  explicit Mxfp4Src(const void* p) : w(static_cast<const uint8_t*>(p)) {}
  static __m512 factor(__m128i s) {
    const __m512i e = _mm512_slli_epi32(_mm512_cvtepu8_epi32(s), 23);
    return _mm512_castsi512_ps(_mm512_max_epi32(e, _mm512_set1_epi32(0x00400000)));
  }
  void block(int64_t b) {
    blk = w + b * kBlockBytes;
    f0 = factor(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    f1 = factor(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
  }
  const char* at(int64_t kk) const {
    return reinterpret_cast<const char*>(w + (kk / 16) * kBlockBytes + 32 + (kk % 16) * 32);
  }
  // The weights of 16 codes (one per byte) under the factors f, as fp32 bits.
  __m512i bits(__m128i codes, __m512 f) const {
    return _mm512_castps_si512(
        _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), values), f));
  }
  void pair(int64_t kk, __m512i& w0, __m512i& w1) const {
    const __m256i b =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + (kk & 15) * 32));
    const __m256i lo = _mm256_and_si256(b, nib), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
    const __mmask32 odd = 0xAAAAAAAAu;
    // (even k's bf16, odd k's bf16) per column: the fp32 values are exact in bf16.
    w0 = _mm512_mask_mov_epi16(_mm512_srli_epi32(bits(_mm256_castsi256_si128(lo), f0), 16), odd,
                               bits(_mm256_castsi256_si128(hi), f0));
    w1 = _mm512_mask_mov_epi16(_mm512_srli_epi32(bits(_mm256_extracti128_si256(lo, 1), f1), 16),
                               odd, bits(_mm256_extracti128_si256(hi, 1), f1));
  }
};

// C[M][NP * 32] (= or +=) kh k pairs of A (M rows of stride kp, bf16 pairs) x the weights of
// NP panels (src[j], each from a block start); pf > 0: prefetch the weights pf bytes ahead (the
// next K block). Every C element is one vdpbf16ps chain in k-pair order, the same for every M
// and NP (batch-invariant); the chains are independent across rows and panels, so few rows
// take several panels per call instead of splitting a sum.
template <int M, int NP, class Src>
inline void dp_tile(const bf16_t* a, int64_t kp, int64_t kh, Src* src, float* c, int64_t ldc,
                    bool accumulate, int64_t pf) {
  constexpr int PB = Src::kPairsPerBlock;
  __m512 c0[NP][M], c1[NP][M];
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    c0[j][r] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * kNR) : _mm512_setzero_ps();
    c1[j][r] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * kNR + 16) : _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < kh; ++kk) {
    if constexpr (PB > 0)
      if (kk % PB == 0)
        CPUKERN_UNROLL for (int j = 0; j < NP; ++j) src[j].block(kk / PB);
    if (pf) {
      CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
        const char* q = src[j].at(kk) + pf;
        _mm_prefetch(q, _MM_HINT_T0);
        _mm_prefetch(q + 64, _MM_HINT_T0);
      }
    }
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      __m512i w0, w1;
      src[j].pair(kk, w0, w1);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        const __m512i av = bcast_pair(a + r * kp + 2 * kk);
        c0[j][r] = dp(c0[j][r], av, w0);
        c1[j][r] = dp(c1[j][r], av, w1);
      }
    }
  }
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    _mm512_storeu_ps(c + r * ldc + j * kNR, c0[j][r]);
    _mm512_storeu_ps(c + r * ldc + j * kNR + 16, c1[j][r]);
  }
}

// The weight sources of panels w, w + panel, ...
template <class Src, class WT, size_t... J>
inline std::array<Src, sizeof...(J)> sources(const WT* w, int64_t panel,
                                             std::index_sequence<J...>) {
  return {Src(w + int64_t(J) * panel)...};
}

// np panels (stride `panel` W) in calls of G panels, the remainder in calls of G/2, G/4, ...
template <int M, int G, class Src, class WT>
inline void dp_panels(const bf16_t* a, int64_t kp, int64_t kh, const WT* w, int64_t panel,
                      int np, float* c, int64_t ldc, bool accumulate, int64_t pf) {
  int j = 0;
  for (; j + G <= np; j += G) {
    auto src = sources<Src>(w + j * panel, panel, std::make_index_sequence<G>());
    dp_tile<M, G>(a, kp, kh, src.data(), c + j * kNR, ldc, accumulate, pf);
  }
  if constexpr (G > 1)
    if (j < np)
      dp_panels<M, G / 2, Src>(a, kp, kh, w + j * panel, panel, np - j, c + j * kNR, ldc,
                               accumulate, pf);
}

// The MXFP4 decode GEMV's fast path (as in avx2_fma.h): each accumulator is divided by its
// column's block scale S = 2**(s - 127) for the block, so the weights enter unscaled: their
// bf16 pair words come from two vpshufb tables and one unpack (no int->float conversion and
// no multiply per weight), and one multiply per accumulator per 32-k block rescales (from one
// block's scale to the next, and back at the end). Scaling by a power of two commutes with
// every rounding while nothing is subnormal or overflows in either domain; vdpbf16ps also
// flushes subnormal inputs and results (DAZ, FTZ), so the window keeps every nonzero value
// normal in both: activations 0 or 2**-40 <= |a| <= 2**32 and the block's scales in
// [95, 159] (every value is a multiple of 2**-80 in the bf16 kernel's domain, of 2**-112 in
// the scaled one; every sum stays below 1.5 * 2**126 in both for K < 2**28, since
// |a e S| <= 6 * 2**64 and 1/S <= 2**32). Other blocks or rows run the exact decode above
// (same bits, slower). Accumulators hold the unpacks' column order
// ([0-3 | 8-11 | 16-19 | 24-27], [4-7 | 12-15 | 20-23 | 28-31]), restored at the store.
namespace mxfp4_fast {

inline bool rows_ok(const bf16_t* a, int64_t kp, int m, int64_t k) {
  if (k >= (int64_t(1) << 28)) return false;
  const __m256i abs = _mm256_set1_epi16(0x7fff), zero = _mm256_setzero_si256();
  const __m256i lo = _mm256_set1_epi16((127 - 40) << 7), hi = _mm256_set1_epi16((127 + 32) << 7);
  __m256i bad = zero;
  for (int r = 0; r < m; ++r)
    for (int64_t j = 0; j < k; j += 16) {  // k: whole 32-k blocks
      const __m256i v = _mm256_and_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + r * kp + j)), abs);
      const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi16(lo, v), _mm256_cmpgt_epi16(v, hi));
      bad = _mm256_or_si256(bad, _mm256_andnot_si256(_mm256_cmpeq_epi16(v, zero), out));
    }
  return _mm256_testz_si256(bad, bad);
}

// All 32 scales of a block (its first 32 bytes) in [95, 159].
inline bool block_ok(const uint8_t* scales) {
  const __m256i s = _mm256_sub_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)),
                                    _mm256_set1_epi8(95));
  return _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(s, _mm256_set1_epi8(64)), s)) == -1;
}

// (x0, x1) <- (permutex2var(x0, i0, x1), permutex2var(x0, i0 + step, x1)).
inline void permute_pair(__m512& x0, __m512& x1, __m512i i0, int step) {
  const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(step));
  const __m512 y0 = _mm512_permutex2var_ps(x0, i0, x1), y1 = _mm512_permutex2var_ps(x0, i1, x1);
  x0 = y0;
  x1 = y1;
}
// Columns [0-15], [16-31] -> the unpack order, and back.
inline void to_unpack_order(__m512& x0, __m512& x1) {
  const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
  permute_pair(x0, x1, i0, 4);
}
inline void from_unpack_order(__m512& x0, __m512& x1) {
  const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  permute_pair(x0, x1, i0, 8);
}

// 2**(s_from - s_to) of the 32 columns, in the unpack order; a null block is C (s = 127).
// In the window both are in [95, 159] or 127, so 127 + s_from - s_to is in [63, 191].
inline void step_factors(const uint8_t* from, const uint8_t* to, __m512& f0, __m512& f1) {
  auto scales = [](const uint8_t* blk) {
    return blk ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)) : _mm256_set1_epi8(127);
  };
  const __m256i u =
      _mm256_sub_epi8(_mm256_add_epi8(scales(from), _mm256_set1_epi8(127)), scales(to));
  auto pow2 = [](__m128i b16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(b16), 23));
  };
  f0 = pow2(_mm256_castsi256_si128(u));
  f1 = pow2(_mm256_extracti128_si256(u, 1));
  to_unpack_order(f0, f1);
}

template <int M, int NP>
inline void tile(const bf16_t* a, int64_t kp, int64_t nb, const uint8_t* w, int64_t panel,
                 float* c, int64_t ldc, bool accumulate, int64_t pf) {
  constexpr int64_t kBB = Mxfp4Src::kBlockBytes;
  auto table = [](const uint8_t* t) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
  };
  const __m512i tlo = table(mxfp4::kBf16Lo), thi = table(mxfp4::kBf16Hi);
  const __m512i nib = _mm512_set1_epi16(0x0f0f);
  __m512 c0[NP][M], c1[NP][M];
  auto load_c = [&] {
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      c0[j][r] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * kNR) : _mm512_setzero_ps();
      c1[j][r] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * kNR + 16) : _mm512_setzero_ps();
      to_unpack_order(c0[j][r], c1[j][r]);
    }
  };
  auto store_c = [&] {
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      from_unpack_order(c0[j][r], c1[j][r]);
      _mm512_storeu_ps(c + r * ldc + j * kNR, c0[j][r]);
      _mm512_storeu_ps(c + r * ldc + j * kNR + 16, c1[j][r]);
    }
  };
  // The accumulators' domain: C, or divided by the scales of the previous fast block (offset
  // `scaled`); the next block's domain is one multiply away (as in avx2_fma.h).
  int64_t scaled = -1;
  auto move_to = [&](int64_t to) {  // a block offset, or -1: C
    if (scaled < 0 && to < 0) return;
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      auto blk = [&](int64_t at) { return at < 0 ? nullptr : w + j * panel + at; };
      __m512 f0, f1;
      step_factors(blk(scaled), blk(to), f0, f1);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        c0[j][r] = _mm512_mul_ps(c0[j][r], f0);
        c1[j][r] = _mm512_mul_ps(c1[j][r], f1);
      }
    }
    scaled = to;
  };
  load_c();
  for (int64_t b = 0; b < nb; ++b) {
    bool fast = true;
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) fast &= block_ok(w + j * panel + b * kBB);
    if (!fast) {  // the exact decode for this block, through C
      move_to(-1);
      store_c();
      auto src = sources<Mxfp4Src>(w + b * kBB, panel, std::make_index_sequence<NP>());
      dp_tile<M, NP>(a + 32 * b, kp, 16, src.data(), c, ldc, true, 0);
      accumulate = true;
      load_c();
      continue;
    }
    move_to(b * kBB);
    const bf16_t* ab = a + 32 * b;
    for (int kk = 0; kk < 16; ++kk) {
      CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
        const uint8_t* q = w + j * panel + b * kBB + 32 + kk * 32;
        if (pf && (kk & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(q) + pf, _MM_HINT_T0);
        const __m512i x =
            _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
        // Per column one word: the even k's code in its low byte, the odd k's in its high byte.
        const __m512i codes = _mm512_and_si512(_mm512_or_si512(x, _mm512_slli_epi16(x, 4)), nib);
        const __m512i lo = _mm512_shuffle_epi8(tlo, codes), hi = _mm512_shuffle_epi8(thi, codes);
        const __m512i u0 = _mm512_unpacklo_epi8(lo, hi), u1 = _mm512_unpackhi_epi8(lo, hi);
        CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
          const __m512i av = bcast_pair(ab + r * kp + 2 * kk);
          c0[j][r] = dp(c0[j][r], av, u0);
          c1[j][r] = dp(c1[j][r], av, u1);
        }
      }
    }
  }
  move_to(-1);
  store_c();
}

// np panels in calls of G, G/2, ... (dp_panels for the fast path).
template <int M, int G>
inline void panels(const bf16_t* a, int64_t kp, int64_t nb, const uint8_t* w, int64_t panel,
                   int np, float* c, int64_t ldc, bool accumulate, int64_t pf) {
  int j = 0;
  for (; j + G <= np; j += G)
    tile<M, G>(a, kp, nb, w + j * panel, panel, c + j * kNR, ldc, accumulate, pf);
  if constexpr (G > 1)
    if (j < np)
      panels<M, G / 2>(a, kp, nb, w + j * panel, panel, np - j, c + j * kNR, ldc, accumulate, pf);
}

}  // namespace mxfp4_fast

template <class Src>
struct Tile : KpairsTile<kNR> {
  // One row block (decode): up to 4 panels per call (panels() below).
  static constexpr int kMR = 8, kActW = 16, kNPGemv = 4;
  // Decode: MXFP4 at T=1 1.2-1.3x faster on Zen 5 with it (bf16 unchanged: at the bandwidth).
  static constexpr int kPrefetchGemv = 2048;
  static constexpr bool kBlockK = true;
  using A = bf16_t;
  // Equal row blocks of at most kMR (9 = 5 + 4, not 8 + 1).
  static int64_t rows(int64_t rem) {
    const int64_t nb = (rem + kMR - 1) / kMR;
    return (rem + nb - 1) / nb;
  }
  static constexpr auto pack_a = avx512bf16::pack_a;
  template <int M, class WT>
  static void tile(const bf16_t* a, int64_t lda, int64_t nk, const WT* w, int64_t panel, int np,
                   float* c, int64_t ldc, bool accumulate, int64_t pf) {
    const int64_t kh = nk * (Src::kPairsPerBlock ? Src::kPairsPerBlock : 1);
    // Panels per call: 8-16 independent chains (2 per row and panel) for every row count.
    constexpr int G = M <= 2 ? 4 : M <= 4 ? 2 : 1;
    if constexpr (std::is_same_v<Src, Mxfp4Src>)
      if (mxfp4_fast::rows_ok(a, lda, M, 2 * kh))
        return mxfp4_fast::panels<M, G>(a, lda, nk, reinterpret_cast<const uint8_t*>(w), panel,
                                        np, c, ldc, accumulate, pf);
    dp_panels<M, G, Src>(a, lda, kh, w, panel, np, c, ldc, accumulate, pf);
  }
};

struct Mxfp4Tile : Tile<Mxfp4Src> {
  static constexpr int kKR = mxfp4::kBlock, kAStep = mxfp4::kBlock;
  static constexpr int kStepW = Mxfp4Src::kBlockBytes;
  static constexpr WeightFormat kFormat = WeightFormat::kMxfp4;
  using W = uint8_t;
  // Prefill (gemm_loop.h decoded_gemm): nk blocks of one panel -> the bf16 kernel's pair words.
  using Decoded = Tile<Bf16Src>;
  static void decode_block(const uint8_t* src, int64_t nk, bf16_t* dst) {
    Mxfp4Src s(src);
    auto* d = reinterpret_cast<uint32_t*>(dst);
    for (int64_t b = 0; b < nk; ++b) {
      s.block(b);
      for (int kk = 0; kk < 16; ++kk) {
        __m512i w0, w1;
        s.pair(kk, w0, w1);
        _mm512_storeu_si512(d + (b * 16 + kk) * kNR, w0);
        _mm512_storeu_si512(d + (b * 16 + kk) * kNR + 16, w1);
      }
    }
  }
  static void pack_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t i,
                         void* dst) {  // code byte j of a column: row j of the panel
    mxfp4::pack_panels<kNR>(blocks, scales, o, i, kStepW, dst,
                            [](int col, int j) { return j * kNR + col; });
  }
};

}  // namespace
}  // namespace cpukern::moe::avx512bf16
