// Naming: ukernels/<isa>_<format>.h (avx512_bf16_bf16.h). The AVX-512 BF16 tiles on MXFP4
// weights: the vdpbf16ps tile of avx512_bf16_bf16.h over MXFP4 sources decoded in registers to
// the bf16 pair words it consumes, plus the decode GEMV's fast path, for two packings
// (mxfp4p32: one byte per column and k pair; mxfp4p32x8: one 32-bit word per column and 8 k).
#pragma once
#include "kernels/common/simd_x86.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernels/avx512_bf16_bf16.h"
#include "kernels/moe/ukernels/panel_sources.h"

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

// The MXFP4 decode GEMV's fast path: each accumulator is divided by its column's block scale
// S = 2**(s - 127) for the block, so the weights enter unscaled (bf16 words of the e2m1
// values, looked up by code: no int->float conversion and no multiply per weight), and one
// multiply per accumulator per 32-k block rescales (from one block's scale to the next, and
// back at the end). Scaling by a power of two commutes with every rounding while nothing is
// subnormal or overflows in either domain; vdpbf16ps also flushes subnormal inputs and results
// (DAZ, FTZ), so the window (mxfp4.h kFast*: why it is exact there) keeps every nonzero value
// normal in both: activations 0 or 2**kFastActMinExpFtz <= |a| <= 2**kFastActMaxExp,
// K < kFastMaxK, the block's scales in [kFastScaleMin, kFastScaleMax]. Other blocks or rows
// run the packing's exact decode (same bits, slower).
namespace mxfp4_fast {

// All 32 scales of a block (its first 32 bytes) in the window (mxfp4::fast_scale_ok:
// s - min <= span, unsigned).
inline bool block_ok(const uint8_t* scales) {
  const __m256i s = _mm256_sub_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)),
                                    _mm256_set1_epi8(mxfp4::kFastScaleMin));
  const __m256i span = _mm256_set1_epi8(mxfp4::kFastScaleSpan);
  return _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(s, span), s)) == -1;
}

// (x0, x1) <- (permutex2var(x0, i0, x1), permutex2var(x0, i0 + step, x1)).
inline void permute_pair(__m512& x0, __m512& x1, __m512i i0, int step) {
  const __m512i i1 = _mm512_add_epi32(i0, _mm512_set1_epi32(step));
  const __m512 y0 = _mm512_permutex2var_ps(x0, i0, x1), y1 = _mm512_permutex2var_ps(x0, i1, x1);
  x0 = y0;
  x1 = y1;
}

// 2**(s_from - s_to) of columns [0-15], [16-31]; a null block is C (s = 127).
// In the window 127 + s_from - s_to is in [kFastStepMin, kFastStepMax] (mxfp4.h): no byte wraps.
inline void step_factors(const uint8_t* from, const uint8_t* to, __m512& f0, __m512& f1) {
  const __m256i bias = _mm256_set1_epi8(mxfp4::kScaleBias);
  auto scales = [&](const uint8_t* blk) {
    return blk ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)) : bias;
  };
  const __m256i u = _mm256_sub_epi8(_mm256_add_epi8(scales(from), bias), scales(to));
  auto pow2 = [](__m128i b16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(b16), 23));
  };
  f0 = pow2(_mm256_castsi256_si128(u));
  f1 = pow2(_mm256_extracti128_si256(u, 1));
}

}  // namespace mxfp4_fast

template <class Layout>
struct Mxfp4Gemv;  // the decode GEMV's fast path over a packing (below)

// 2**(s - 127) of 16 columns' scale bytes as fp32 (s = 0: the subnormal 2**-127).
inline __m512 scale_factors(const uint8_t* s) {
  const __m512i e = _mm512_slli_epi32(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))), 23);
  return _mm512_castsi512_ps(_mm512_max_epi32(e, _mm512_set1_epi32(0x00400000)));
}

// MXFP4 weights ("mxfp4p32": per panel per block of 32 k, the 32 columns' scales, then per k
// pair j the 32 columns' bytes j: 544 bytes). Exact decode per k pair: vpermps looks each
// code's e2m1 value up as fp32 (code 8: -0), times 2**(s - 127) (exact) -> the high halves.
// Fast path: vpmovzxbw + two vpshufb tables + one unpack per 64 weights, the accumulators in
// the unpacks' column order ([0-3 | 8-11 | 16-19 | 24-27], [4-7 | 12-15 | 20-23 | 28-31]).
struct Mxfp4Src {
  static constexpr int kPairsPerBlock = 16, kBlockBytes = 32 + 16 * 32;
  using FastGemv = Mxfp4Gemv<Mxfp4Src>;
  const uint8_t* w;
  const uint8_t* blk = nullptr;
  __m512 f0, f1;  // 2**(s - 127) of columns 0-15, 16-31
  const __m512 values = _mm512_load_ps(mxfp4::kValue);
  const __m256i nib = _mm256_set1_epi8(0x0f);
  explicit Mxfp4Src(const void* p) : w(static_cast<const uint8_t*>(p)) {}
  void block(int64_t b) {
    blk = w + b * kBlockBytes;
    f0 = scale_factors(blk);
    f1 = scale_factors(blk + 16);
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

  // Columns [0-15], [16-31] -> the unpack order, and back.
  static void to_acc_order(__m512& x0, __m512& x1) {
    const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    mxfp4_fast::permute_pair(x0, x1, i0, 4);
  }
  static void from_acc_order(__m512& x0, __m512& x1) {
    const __m512i i0 = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    mxfp4_fast::permute_pair(x0, x1, i0, 8);
  }
  // One block's 16 k pairs of NP panels (wb: panel 0's block) on unscaled weights.
  template <int M, int NP>
  static void fast_block(const bf16_t* ab, int64_t kp, const uint8_t* wb, int64_t panel,
                         __m512 (&c0)[NP][M], __m512 (&c1)[NP][M], int64_t pf) {
    auto table = [](const uint8_t* t) {
      return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    };
    const __m512i tlo = table(mxfp4::kBf16Lo), thi = table(mxfp4::kBf16Hi);
    const __m512i nib16 = _mm512_set1_epi16(0x0f0f);
    for (int kk = 0; kk < 16; ++kk) {
      CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
        const uint8_t* q = wb + j * panel + 32 + kk * 32;
        if (pf && (kk & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(q) + pf, _MM_HINT_T0);
        const __m512i x =
            _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
        // Per column one word: the even k's code in its low byte, the odd k's in its high byte.
        const __m512i codes = _mm512_and_si512(_mm512_or_si512(x, _mm512_slli_epi16(x, 4)), nib16);
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
  static void pack(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t i,
                   void* dst) {  // code byte j of a column: row j of the panel
    mxfp4::pack_panels<kNR>(blocks, scales, o, i, kBlockBytes, dst,
                            [](int col, int j) { return j * kNR + col; });
  }
};

// MXFP4 weights ("mxfp4p32x8", mxfp4.h pack_x8: per panel per block of 32 k, the 32 columns'
// scales, then per group g of 8 k the 32 columns' 32-bit words: nibble t (bits 4t..4t+3) of a
// column's word holds k = 8g + 2t for t < 4 and k = 8g + 2(t - 4) + 1 for t >= 4; 544
// bytes). Shifting the
// 16-bit halves right by 4t leaves k pair t's two codes in bits 0-3 of the two halves, in the
// vdpbf16ps pair order already; vpermw (index bits 0-4: a table of the 16 codes' bf16 words,
// twice) then gives 32 weights per permute, so the decode of 32 weights is one shift and one
// permute. Exact decode: the same words widened to fp32 and multiplied by 2**(s - 127) (exact)
// -> the high halves.
struct Mxfp4x8Src {
  static constexpr int kPairsPerBlock = 16, kBlockBytes = 32 + 16 * 32, kGroupBytes = 4 * kNR;
  using FastGemv = Mxfp4Gemv<Mxfp4x8Src>;
  const uint8_t* w;
  const uint8_t* blk = nullptr;
  __m512 f0, f1;  // 2**(s - 127) of columns 0-15, 16-31
  const __m512i table = bf16_table();
  explicit Mxfp4x8Src(const void* p) : w(static_cast<const uint8_t*>(p)) {}
  // The bf16 words of codes 0..15, twice (vpermw reads index bits 0-4).
  static __m512i bf16_table() {
    auto bytes = [](const uint8_t* t) {
      return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    };
    const __m256i words =
        _mm256_or_si256(bytes(mxfp4::kBf16Lo), _mm256_slli_epi16(bytes(mxfp4::kBf16Hi), 8));
    return _mm512_inserti64x4(_mm512_castsi256_si512(words), words, 1);
  }
  static __m512i load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  void block(int64_t b) {
    blk = w + b * kBlockBytes;
    f0 = scale_factors(blk);
    f1 = scale_factors(blk + 16);
  }
  const char* at(int64_t kk) const {
    return reinterpret_cast<const char*>(w + (kk / 16) * kBlockBytes + 32 +
                                         (kk % 16) / 4 * kGroupBytes);
  }
  // Pair words v (unscaled bf16) times 2**(s - 127) per column (f), exact: as fp32 then the
  // high halves (the products have at most two significant bits).
  static __m512i scaled(__m512i v, __m512 f) {
    const __m512 even = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), f);
    const __m512 odd = _mm512_mul_ps(
        _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int32_t(0xFFFF0000u)))), f);
    return _mm512_mask_mov_epi16(_mm512_srli_epi32(_mm512_castps_si512(even), 16),
                                 __mmask32(0xAAAAAAAAu), _mm512_castps_si512(odd));
  }
  void pair(int64_t kk, __m512i& w0, __m512i& w1) const {
    const uint8_t* g = blk + 32 + (kk & 15) / 4 * kGroupBytes;
    const __m512i shift = _mm512_set1_epi16(int16_t(4 * (kk & 3)));
    w0 = scaled(_mm512_permutexvar_epi16(_mm512_srlv_epi16(load(g), shift), table), f0);
    w1 = scaled(_mm512_permutexvar_epi16(_mm512_srlv_epi16(load(g + 64), shift), table), f1);
  }

  // The accumulators keep the columns' order.
  static void to_acc_order(__m512&, __m512&) {}
  static void from_acc_order(__m512&, __m512&) {}
  // One block's 16 k pairs of NP panels (wb: panel 0's block) on unscaled weights.
  template <int M, int NP>
  static void fast_block(const bf16_t* ab, int64_t kp, const uint8_t* wb, int64_t panel,
                         __m512 (&c0)[NP][M], __m512 (&c1)[NP][M], int64_t pf) {
    const __m512i tbl = bf16_table();
    CPUKERN_UNROLL for (int g = 0; g < 4; ++g) {
      CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
        const uint8_t* q = wb + j * panel + 32 + g * kGroupBytes;
        if (pf) {
          _mm_prefetch(reinterpret_cast<const char*>(q) + pf, _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(q) + pf + 64, _MM_HINT_T0);
        }
        const __m512i x0 = load(q), x1 = load(q + 64);
        const __m512i s0[4] = {x0, _mm512_srli_epi16(x0, 4), _mm512_srli_epi16(x0, 8),
                               _mm512_srli_epi16(x0, 12)};
        const __m512i s1[4] = {x1, _mm512_srli_epi16(x1, 4), _mm512_srli_epi16(x1, 8),
                               _mm512_srli_epi16(x1, 12)};
        CPUKERN_UNROLL for (int t = 0; t < 4; ++t) {
          const __m512i u0 = _mm512_permutexvar_epi16(s0[t], tbl);
          const __m512i u1 = _mm512_permutexvar_epi16(s1[t], tbl);
          CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
            const __m512i av = bcast_pair(ab + r * kp + 2 * (4 * g + t));
            c0[j][r] = dp(c0[j][r], av, u0);
            c1[j][r] = dp(c1[j][r], av, u1);
          }
        }
      }
    }
  }
  static constexpr auto pack = mxfp4::pack_x8<kNR>;
  static_assert(kBlockBytes == mxfp4::x8_block_bytes(kNR));
};

namespace mxfp4_fast {

// The fast path over one packing (Layout: Mxfp4Src or Mxfp4x8Src, whose to_acc_order /
// from_acc_order map columns [0-15], [16-31] to the accumulators' order and back, and whose
// fast_block runs one block's 16 k pairs on unscaled e2m1 weights).
template <int M, int NP, class Layout>
inline void tile(const bf16_t* a, int64_t kp, int64_t nb, const uint8_t* w, int64_t panel,
                 float* c, int64_t ldc, bool accumulate, int64_t pf) {
  constexpr int64_t kBB = Layout::kBlockBytes;
  __m512 c0[NP][M], c1[NP][M];
  auto load_c = [&] {
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      c0[j][r] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * kNR) : _mm512_setzero_ps();
      c1[j][r] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * kNR + 16) : _mm512_setzero_ps();
      Layout::to_acc_order(c0[j][r], c1[j][r]);
    }
  };
  auto store_c = [&] {
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      Layout::from_acc_order(c0[j][r], c1[j][r]);
      _mm512_storeu_ps(c + r * ldc + j * kNR, c0[j][r]);
      _mm512_storeu_ps(c + r * ldc + j * kNR + 16, c1[j][r]);
    }
  };
  // The accumulators' domain: C, or divided by the scales of the previous fast block (offset
  // `scaled`); the next block's domain is one multiply away (as in avx2_fma_mxfp4.h).
  int64_t scaled = -1;
  auto move_to = [&](int64_t to) {  // a block offset, or -1: C
    if (scaled < 0 && to < 0) return;
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      auto blk = [&](int64_t at) { return at < 0 ? nullptr : w + j * panel + at; };
      __m512 f0, f1;
      step_factors(blk(scaled), blk(to), f0, f1);
      Layout::to_acc_order(f0, f1);
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
      auto src = sources<Layout>(w + b * kBB, panel, std::make_index_sequence<NP>());
      dp_tile<M, NP>(a + 32 * b, kp, 16, src.data(), c, ldc, true, 0);
      accumulate = true;
      load_c();
      continue;
    }
    move_to(b * kBB);
    Layout::template fast_block<M, NP>(a + 32 * b, kp, w + b * kBB, panel, c0, c1, pf);
  }
  move_to(-1);
  store_c();
}

}  // namespace mxfp4_fast

// The fast path as Src::FastGemv (Tile::tile): rows_ok admits the rows (and K), panels runs
// them (each block checked by mxfp4_fast::block_ok).
template <class Layout>
struct Mxfp4Gemv {
  // Every activation of the m rows 0 or in the window, and K < kFastMaxK.
  static bool rows_ok(const bf16_t* a, int64_t kp, int m, int64_t k) {
    if (k >= mxfp4::kFastMaxK) return false;
    const __m256i abs = _mm256_set1_epi16(0x7fff), zero = _mm256_setzero_si256();
    const __m256i lo = _mm256_set1_epi16(mxfp4::kFastActLoBf16);
    const __m256i hi = _mm256_set1_epi16(mxfp4::kFastActHiBf16);
    __m256i bad = zero;
    for (int r = 0; r < m; ++r)
      for (int64_t j = 0; j < k; j += 16) {  // k: whole 32-k blocks
        const __m256i v = _mm256_and_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + r * kp + j)), abs);
        const __m256i out =
            _mm256_or_si256(_mm256_cmpgt_epi16(lo, v), _mm256_cmpgt_epi16(v, hi));
        bad = _mm256_or_si256(bad, _mm256_andnot_si256(_mm256_cmpeq_epi16(v, zero), out));
      }
    return _mm256_testz_si256(bad, bad);
  }

  // np panels in calls of G, G/2, ... (dp_panels for the fast path).
  template <int M, int G>
  static void panels(const bf16_t* a, int64_t kp, int64_t nb, const uint8_t* w, int64_t panel,
                     int np, float* c, int64_t ldc, bool accumulate, int64_t pf) {
    panel_groups<G>(np, [&](auto g, int j) {
      mxfp4_fast::tile<M, g, Layout>(a, kp, nb, w + j * panel, panel, c + j * kNR, ldc,
                                     accumulate, pf);
    });
  }
};

// The MXFP4 tile over a packing's source Src (Mxfp4Src, Mxfp4x8Src).
template <class Src>
struct Mxfp4TileOf : Mxfp4TileOver<Tile<Src>, Src::kBlockBytes> {
  // Prefill (gemm_loop.h decoded_gemm): nk blocks of one panel -> the bf16 kernel's pair words.
  using Decoded = Tile<Bf16Src>;
  static void decode_block(const uint8_t* src, int64_t nk, bf16_t* dst) {
    Mxfp4TileOf::template decode_pairs<Src>(src, nk, dst, [](const Src& s, int kk, uint32_t* d) {
      __m512i w0, w1;
      s.pair(kk, w0, w1);
      _mm512_storeu_si512(d, w0);
      _mm512_storeu_si512(d + 16, w1);
    });
  }
  static constexpr auto pack_mxfp4 = Src::pack;
};
using Mxfp4Tile = Mxfp4TileOf<Mxfp4Src>;
using Mxfp4x8Tile = Mxfp4TileOf<Mxfp4x8Src>;

}  // namespace
}  // namespace cpukern::moe::avx512bf16
