// Naming: ukernels/<isa>_<format>.h (avx2_fma_bf16.h). The AVX2 + FMA tile on MXFP4 weights:
// the bf16 tile of avx2_fma_bf16.h over MXFP4 sources, plus the decode GEMV's fast path.
//
// MXFP4 ("mxfp4p16x4", 4.25 bits per weight): per panel of 16 columns per block of 32 k, the 16
// columns' e8m0 scales, then per two k pairs (j, j + 1; j even) 32 bytes: columns 0-7's bytes
// j, their bytes j + 1, columns 8-15's bytes j, their bytes j + 1 (a byte = the k, k+1 codes as
// stored on disk): 272 bytes. One aligned 32-byte load then holds 4 k x 16 columns with each
// 128-bit lane one column half, so the nibble split (an and, a shift) and the in-lane vpshufb
// and unpacks give every k's codes without a lane-crossing shuffle. The exact per-weight
// decode (Mxfp4Src): two vpshufb give each code's bf16 bytes (-0 for code 8), an unpack and
// a widening shift make them fp32, and one multiply by the column's 2**(s - 127) gives the
// exact weight (mxfp4.h value()) that the bf16 kernel would have loaded.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <utility>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernels/avx2_fma_bf16.h"
#include "kernels/moe/ukernels/panel_sources.h"

namespace cpukern::moe::avx2 {
namespace {  // internal linkage: compiled per ISA

// The even-k (low nibble) or odd-k (high nibble) codes of 32 bytes of the layout, one per byte.
// The 16-bit shift moves each byte's high nibble down; `nib` (0x0f bytes) drops what the
// neighbouring byte shifted in.
inline __m256i split_codes(__m256i x, bool odd, __m256i nib) {
  return _mm256_and_si256(odd ? _mm256_srli_epi16(x, 4) : x, nib);
}

// The bf16 words of k = 2 kk + i (i = 0..3) of 16 columns, from the 32 layout bytes x of k
// pairs kk, kk + 1: the codes split, looked up in tl / th (each e2m1 value's bf16 low / high
// byte) and interleaved (lane h: columns 8h .. 8h + 7). Called for i = 0..3 on one x, the
// splits and lookups are computed once (pure operations).
inline __m256i code_words(__m256i x, int i, __m256i tl, __m256i th, __m256i nib) {
  const __m256i c = split_codes(x, i & 1, nib);
  const __m256i l = _mm256_shuffle_epi8(tl, c), h = _mm256_shuffle_epi8(th, c);
  return i & 2 ? _mm256_unpackhi_epi8(l, h) : _mm256_unpacklo_epi8(l, h);
}

// 2**(u - 127) of 16 bytes u (u = 0 gives the subnormal 2**-127, mxfp4::scale_bits): bytes
// 0-7 in f0, 8-15 in f1.
inline void pow2_bytes(__m128i u, __m256& f0, __m256& f1) {
  const __m256i sub = _mm256_set1_epi32(0x00400000);
  auto factor = [&](__m128i b8) {
    return _mm256_castsi256_ps(_mm256_max_epi32(_mm256_slli_epi32(_mm256_cvtepu8_epi32(b8), 23), sub));
  };
  f0 = factor(u);
  f1 = factor(_mm_unpackhi_epi64(u, u));
}

// 2**(s - 127) of a block's 16 columns (scales at blk): columns 0-7 in f0, 8-15 in f1.
inline void scale_factors(const uint8_t* blk, __m256& f0, __m256& f1) {
  pow2_bytes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)), f0, f1);
}

// pow2_bytes of 16 columns' bytes in the accumulators' even/odd column order (to_even_odd
// below): one byte shuffle instead of four dword shuffles per pair.
inline void pow2_even_odd(__m128i u, __m256& f0, __m256& f1) {
  pow2_bytes(
      _mm_shuffle_epi8(u, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)),
      f0, f1);
}

struct Mxfp4Gemv;  // the decode GEMV's fast path (below)

// MXFP4 weights in the mxfp4p16x4 layout (above), from the first block of the tile's K range.
struct Mxfp4Src {
  static constexpr int kPairsPerBlock = 16, kBlockBytes = 16 + 16 * 16;
  static constexpr bool kEvenOdd = false;
  using FastGemv = Mxfp4Gemv;
  const uint8_t* w;
  const uint8_t* blk = nullptr;
  // 2**(s - 127) of columns 0-7, 8-15, kept in memory and read through a laundered pointer
  // as vmulps memory operands: the one-row GEMV's 8 accumulators (the bf16 kernel's sum order)
  // + tables + operands then fit the 16 registers (held in registers, GCC spilled two
  // accumulators instead: a store-forwarding chain per step, ~2x slower).
  alignas(32) float fs[16];
  // The bf16 low and high bytes of each code's e2m1 value (-0 for code 8, as dequantize).
  const __m128i tlo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mxfp4::kBf16Lo));
  const __m128i thi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mxfp4::kBf16Hi));
  static __m128i nib() {
    alignas(16) static const uint8_t k[16] = {15, 15, 15, 15, 15, 15, 15, 15,
                                              15, 15, 15, 15, 15, 15, 15, 15};
    return _mm_load_si128(reinterpret_cast<const __m128i*>(launder_ptr(k)));
  }
  explicit Mxfp4Src(const void* p) : w(static_cast<const uint8_t*>(p)) {}
  void block(int64_t b) {
    blk = w + b * kBlockBytes;
    __m256 f0, f1;
    scale_factors(blk, f0, f1);
    _mm256_store_ps(fs, f0);
    _mm256_store_ps(fs + 8, f1);
  }
  const void* at(int64_t kk) const { return w + (kk / 16) * kBlockBytes + 16 + (kk % 16) * 16; }
  // Bytes kk of the 16 columns, in column order (the layout's two 8-byte halves).
  __m128i bytes(int64_t kk) const {
    const uint8_t* p = blk + 16 + (kk & 14) * 16 + (kk & 1) * 8;
    return _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)),
                              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16)));
  }
  // The e2m1 values of 16 codes (bf16 words widened to fp32, the sign of -0 kept) times
  // 2**(s - 127): exact for every s < 255 (two significant bits, subnormals included).
  void decode(__m128i codes, __m256& v0, __m256& v1) const {
    const __m128i l = _mm_shuffle_epi8(tlo, codes), h = _mm_shuffle_epi8(thi, codes);
    auto fp32 = [](__m128i words) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(words), 16));
    };
    const float* f = launder_ptr(fs);
    v0 = _mm256_mul_ps(fp32(_mm_unpacklo_epi8(l, h)), _mm256_load_ps(f));
    v1 = _mm256_mul_ps(fp32(_mm_unpackhi_epi8(l, h)), _mm256_load_ps(f + 8));
  }
  void lo(int64_t kk, __m256& l0, __m256& l1) const {
    decode(_mm_and_si128(bytes(kk), nib()), l0, l1);
  }
  void hi(int64_t kk, __m256& h0, __m256& h1) const {
    decode(_mm_and_si128(_mm_srli_epi16(bytes(kk), 4), nib()), h0, h1);
  }
  void load(int64_t kk, __m256& l0, __m256& l1, __m256& h0, __m256& h1) const {
    const __m128i b = bytes(kk);
    decode(_mm_and_si128(b, nib()), l0, l1);
    decode(_mm_and_si128(_mm_srli_epi16(b, 4), nib()), h0, h1);
  }
};

// Decoded MXFP4 weights (Mxfp4Tile::decode_block): per k, 16 fp32 in the even/odd column
// order below, k pair kk at w + 32 kk. The exact weight values, so the tile's FMAs read them
// as memory operands with no widening per row block.
struct F32Src {
  static constexpr int kPairsPerBlock = 0;
  static constexpr bool kEvenOdd = true;
  using FastGemv = void;
  const float* w;
  explicit F32Src(const void* p) : w(static_cast<const float*>(p)) {}
  void block(int64_t) {}
  const void* at(int64_t kk) const { return w + kk * 2 * kNR; }
  void lo(int64_t kk, __m256& l0, __m256& l1) const {
    l0 = _mm256_load_ps(w + kk * 2 * kNR);
    l1 = _mm256_load_ps(w + kk * 2 * kNR + 8);
  }
  void hi(int64_t kk, __m256& h0, __m256& h1) const {
    h0 = _mm256_load_ps(w + kk * 2 * kNR + kNR);
    h1 = _mm256_load_ps(w + kk * 2 * kNR + kNR + 8);
  }
};

// The MXFP4 decode GEMV's fast path (1-5 rows, `NP` panels): the bf16 kernel's FMA chains run
// with each accumulator divided by its column's block scale S = 2**(s - 127) for the block,
// so the weights enter as the unscaled e2m1 values, decoded straight to fp32 (two vpshufb
// tables give each value's bf16 bytes, a shift or a mask widens them): no int->float
// conversion and no multiply per weight, one multiply per accumulator per 32-k block instead
// (from one block's scale to the next: by 2**(s_prev - s)), and one at the end.
// Scaling by a power of two commutes with every rounding while no value leaves fp32's normal
// range or needs bits below its subnormal step, so the results equal the bf16 kernel's bit
// for bit. Mxfp4Gemv::rows_ok and fast_block_ok admit exactly the inputs where that holds, the
// window of mxfp4.h (kFast*: why it is exact there): activations 0 or
// 2**kFastActMinExp <= |a| <= 2**kFastActMaxExp (this tile keeps subnormals), K < kFastMaxK,
// the block's scales in [kFastScaleMin, kFastScaleMax].
// Anything else (non-finite or extreme activations, extreme scales) runs the exact per-weight
// decode below for that block: the same bits, only slower. Accumulators hold the column order
// of the in-lane unpacks (even columns [0 2 4 6 | 8 10 12 14], odd [1 3 5 7 | 9 11 13 15]),
// restored at the store.

// All 16 scales of a block in the window (mxfp4::fast_scale_ok: s - min <= span, unsigned).
inline bool fast_block_ok(const uint8_t* scales) {
  const __m128i s = _mm_sub_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)),
                                 _mm_set1_epi8(mxfp4::kFastScaleMin));
  const __m128i span = _mm_set1_epi8(mxfp4::kFastScaleSpan);
  return _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(s, span), s)) == 0xffff;
}

// Out of line: inlined into blocked_gemm, GCC spilled the 4- and 5-row tiles' accumulators
// (1.5x slower; the 1-3 row tiles were unaffected).
template <int M, int NP, bool PF>
[[gnu::noinline]] void mxfp4_gemv_tile(const float* a, int64_t kp, int64_t nb,
                                       const uint8_t* w, int64_t panel, float* c, int64_t ldc,
                                       bool accumulate, int64_t pf) {
  constexpr int64_t kBB = Mxfp4Src::kBlockBytes;
  // kConst: the bf16 low and high bytes of each code's e2m1 value (mxfp4::kBf16Lo / kBf16Hi in
  // both lanes), the nibble mask, the high-half mask.
  // The tables and masks, 32 bytes each, are re-read from L1 through a laundered pointer
  // (loads are cheap): held in registers next to the 8 accumulators, GCC spilled two
  // accumulators (a store-forwarding chain per k pair).
  struct alignas(32) Consts {
    uint8_t t[4][32];
  };
  static constexpr Consts kConst = [] {
    Consts k{};
    for (int i = 0; i < 32; ++i) {
      k.t[0][i] = mxfp4::kBf16Lo[i % 16];
      k.t[1][i] = mxfp4::kBf16Hi[i % 16];
      k.t[2][i] = 15;
      k.t[3][i] = i % 4 >= 2 ? 0xff : 0;  // the high 16 bits of each dword
    }
    return k;
  }();
  auto cst = [](int i) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(launder_ptr(kConst.t[i])));
  };
  __m256 c0[NP][M], c1[NP][M];
  auto load_c = [&] {
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      c0[j][r] = accumulate ? _mm256_loadu_ps(c + r * ldc + j * kNR) : _mm256_setzero_ps();
      c1[j][r] = accumulate ? _mm256_loadu_ps(c + r * ldc + j * kNR + 8) : _mm256_setzero_ps();
      to_even_odd(c0[j][r], c1[j][r]);
    }
  };
  auto store_c = [&] {
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      from_even_odd(c0[j][r], c1[j][r]);
      _mm256_storeu_ps(c + r * ldc + j * kNR, c0[j][r]);
      _mm256_storeu_ps(c + r * ldc + j * kNR + 8, c1[j][r]);
    }
  };
  // The accumulators' domain: true values (C), or divided by the scales of the previous fast
  // block (at panel offset `scaled`); moving to the next block's domain is one multiply by
  // 2**(s_prev - s), exact whenever the two steps through C are (its result is the same value).
  int64_t scaled = -1;
  auto move_to = [&](int64_t to) {  // a block offset, or -1: C (s = 127)
    if (scaled < 0 && to < 0) return;
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
      auto scales = [&](int64_t at) {
        return at < 0 ? _mm_set1_epi8(mxfp4::kScaleBias)
                      : _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + j * panel + at));
      };
      // 127 + s_from - s_to: in [kFastStepMin, kFastStepMax] (mxfp4.h), no byte wraps.
      __m256 f0, f1;
      const __m128i bias = _mm_set1_epi8(mxfp4::kScaleBias);
      pow2_even_odd(_mm_sub_epi8(_mm_add_epi8(scales(scaled), bias), scales(to)), f0, f1);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        c0[j][r] = _mm256_mul_ps(c0[j][r], f0);
        c1[j][r] = _mm256_mul_ps(c1[j][r], f1);
      }
    }
    scaled = to;
  };
  load_c();
  for (int64_t b = 0; b < nb; ++b) {
    bool fast = true;
    CPUKERN_UNROLL for (int j = 0; j < NP; ++j) fast &= fast_block_ok(w + j * panel + b * kBB);
    if (!fast) {  // the exact decode for this block, through C
      move_to(-1);
      store_c();
      auto src = sources<Mxfp4Src>(w + b * kBB, panel, std::make_index_sequence<NP>());
      fma_tile<M, NP, false>(a + 32 * b, kp, 16, src.data(), c, ldc, true, 0);
      accumulate = true;
      load_c();
      continue;
    }
    move_to(b * kBB);
    const float* ab = a + 32 * b;
    for (int kk = 0; kk < 16; kk += 2) {  // two k pairs: k = 2 kk .. 2 kk + 3
      if constexpr (PF)
        CPUKERN_UNROLL for (int j = 0; j < NP; ++j)
          _mm_prefetch(reinterpret_cast<const char*>(w + j * panel + b * kBB + 16 + kk * 16) + pf,
                       _MM_HINT_T0);
      CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
        const uint8_t* xb = w + j * panel + b * kBB + 16 + kk * 16;
        // bf16 words of one k's 16 columns; shift / mask give the even / odd columns' fp32.
        auto fma_k = [&](__m256i u, int k) __attribute__((always_inline)) {
          const __m256 e = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
          const __m256 o = _mm256_castsi256_ps(_mm256_and_si256(u, cst(3)));
          CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
            const __m256 av = _mm256_broadcast_ss(ab + r * kp + k);
            c0[j][r] = _mm256_fmadd_ps(av, e, c0[j][r]);
            c1[j][r] = _mm256_fmadd_ps(av, o, c1[j][r]);
          }
        };
        // Each element's chain in k order: 2 kk, 2 kk + 1, 2 kk + 2, 2 kk + 3.
        // How many lookups stay live is chosen per row count by measurement (Zen 5): GCC's
        // register allocation of the 16 ymm decides, not the uop count.
        if constexpr (M <= 2 || M == 4) {  // each lookup once
          // Even k's codes (bytes 0-7 of a lane: k = 2 kk, 8-15: 2 kk + 2), odd k's (+1).
          const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb));
          const __m256i tl = cst(0), th = cst(1), nib = cst(2);
          CPUKERN_UNROLL for (int i = 0; i < 4; ++i)
            fma_k(code_words(x, i, tl, th, nib), 2 * kk + i);
        } else {
          // 3 or 5 rows: per k, split the codes (from L1) and look them up again instead of
          // holding the 4 lookups or both code registers (GCC spilled them).
          CPUKERN_UNROLL for (int i = 0; i < 4; ++i) {
            // A fresh (volatile-laundered) pointer per k: GCC would merge the loads and keep
            // the lookups live.
            const uint8_t* q = xb;
            asm volatile("" : "+r"(q));
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
            fma_k(code_words(v, i, cst(0), cst(1), cst(2)), 2 * kk + i);
          }
        }
      }
    }
  }
  move_to(-1);
  store_c();
}

// The fast path as Mxfp4Src::FastGemv (Tile::tile): rows_ok admits the rows (and K), panels
// runs them (each block checked by fast_block_ok).
struct Mxfp4Gemv {
  // Every activation of the M rows 0 or in the window, and K < kFastMaxK.
  static bool rows_ok(const float* a, int64_t kp, int M, int64_t k) {
    if (k >= mxfp4::kFastMaxK) return false;
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    const __m256i lo = _mm256_set1_epi32(mxfp4::kFastActLoF32);
    const __m256i hi = _mm256_set1_epi32(mxfp4::kFastActHiF32);
    __m256i bad = _mm256_setzero_si256();
    for (int r = 0; r < M; ++r)
      for (int64_t j = 0; j < k; j += 8) {  // k is a multiple of 32 (whole blocks)
        const __m256i v = _mm256_and_si256(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + r * kp + j)), abs);
        // bad: v != 0 and (v < lo or v > hi) (signed compares: v <= 0x7fffffff)
        const __m256i out =
            _mm256_or_si256(_mm256_cmpgt_epi32(lo, v), _mm256_cmpgt_epi32(v, hi));
        const __m256i zero = _mm256_cmpeq_epi32(v, _mm256_setzero_si256());
        bad = _mm256_or_si256(bad, _mm256_andnot_si256(zero, out));
      }
    return _mm256_testz_si256(bad, bad);
  }

  // np panels in calls of G, G/2, ... (fma_panels for the fast path).
  template <int M, int G, bool PF>
  static void panels(const float* a, int64_t kp, int64_t nb, const uint8_t* w, int64_t panel,
                     int np, float* c, int64_t ldc, bool accumulate, int64_t pf) {
    panel_groups<G>(np, [&](auto g, int j) {
      mxfp4_gemv_tile<M, g, PF>(a, kp, nb, w + j * panel, panel, c + j * kNR, ldc, accumulate,
                                pf);
    });
  }
};

// The MXFP4 tile: the bf16 tile over Mxfp4Src, whose FastGemv (Mxfp4Gemv) runs the calls
// whose rows it admits.
struct Mxfp4Tile : Mxfp4TileOver<Tile<Mxfp4Src>, Mxfp4Src::kBlockBytes> {
  // Prefill (gemm_loop.h decoded_gemm): nk blocks of one panel -> the exact fp32 weights in
  // F32Src's order, so the row blocks' FMAs take them as memory operands (the bf16 tile would
  // widen every k pair again in each row block). Per two k pairs of 16 columns (128 weights):
  // the nibble split (3 ops), 4 vpshufb (bf16 bytes of each e2m1 value), 4 unpacks (bf16 words),
  // 8 shift/mask (fp32, even and odd columns), 8 multiplies by the columns' 2**(s - 127) (exact
  // for every s < 255: two significant bits, exponent in fp32's range), 8 stores.
  struct Decoded : Tile<F32Src> {
    using W = float;
    // The FMAs take the weights as memory operands, so 6 rows (12 accumulators) fit the 16
    // registers; row blocks split the rows evenly (8 = 4 + 4: no latency-bound 2-row tail).
    static constexpr int kMR = 6;
    static int64_t rows(int64_t rem) {
      const int64_t blocks = (rem + kMR - 1) / kMR;
      return (rem + blocks - 1) / blocks;
    }
  };
  static void decode_block(const uint8_t* src, int64_t nk, float* dst) {
    const __m256i tl =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mxfp4::kBf16Lo)));
    const __m256i th =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mxfp4::kBf16Hi)));
    const __m256i nib = _mm256_set1_epi8(0x0f), hi_mask = _mm256_set1_epi32(int(0xffff0000u));
    for (int64_t b = 0; b < nk; ++b) {
      const uint8_t* blk = src + b * Mxfp4Src::kBlockBytes;
      __m256 f0, f1;
      pow2_even_odd(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)), f0, f1);
      float* d = dst + b * mxfp4::kBlock * kNR;
      for (int kk = 0; kk < 16; kk += 2) {  // codes of k = 2 kk .. 2 kk + 3 (mxfp4_gemv_tile)
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + kk * 16));
        for (int i = 0; i < 4; ++i) {
          const __m256i u = code_words(x, i, tl, th, nib);
          float* out = d + (2 * kk + i) * kNR;
          _mm256_store_ps(out, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(u, 16)), f0));
          _mm256_store_ps(out + 8,
                          _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(u, hi_mask)), f1));
        }
      }
    }
  }
  // [panel][block][16 scales, 16 pairs x 16 columns]: see the layout above.
  static void pack_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t i,
                         void* dst) {  // code byte j of a column: row j of the panel
    mxfp4::pack_panels<kNR>(blocks, scales, o, i, kStepW, dst, [](int col, int j) {
      return (j / 2) * 32 + (col / 8) * 16 + (j % 2) * 8 + col % 8;
    });
  }
};

}  // namespace
}  // namespace cpukern::moe::avx2
