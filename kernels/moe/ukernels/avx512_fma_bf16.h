// Naming: ukernels/<isa>_<format>.h (avx2_fma_bf16.h). The fp32-FMA register tile of the
// micro-kernels whose files end in __avx512 (AVX-512 F/BW/VL without AVX512_BF16: Skylake-SP,
// Cascade Lake, Ice Lake), for bf16 weights; avx512_fma_mxfp4.h reuses it for MXFP4. ("fma"
// keeps these headers apart from avx512_bf16_*.h, the vdpbf16ps tiles.)
//
// The avx2_fma tile on zmm: weights widened in registers (one 32-bit word holds the k and k+1
// weights of a column: `<< 16` gives the first as fp32, its high half the second), A rows
// pre-widened to fp32 and broadcast from memory (a load, no shuffle), and each C element one
// FMA chain in k order (c += a[2k] w[2k]; c += a[2k+1] w[2k+1]) for every row count:
// batch-invariant, and the avx2_fma tile's operations (the same bits).
//
// 8 rows x 32 columns: 16 zmm accumulators. Per k pair and 32 columns the FMAs (4 per row)
// share the two 512-bit ports with two widening shifts (the odd k's high halves come from a
// zero-masking 16-bit load instead of an and): 1/17 of those slots at 8 rows. 12 rows (24
// accumulators) fit this tile too (1/25), but the MXFP4 kernel runs the same rows with its
// decode in registers (scale factors, value table, codes) and GCC 12 spilled its accumulators
// inside the k loop above 9 rows; a row's bf16 and MXFP4 kernels share mr, and 8 x 32 is the
// avx512_bf16 tile's shape. Few rows (decode) cover several panels per call instead: 8 or more
// independent chains (FMA latency 4, two ports).
#pragma once
#include "kernels/common/simd_x86.h"

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/pack_kpairs.h"
#include "kernels/moe/ukernels/panel_sources.h"

namespace cpukern::moe::avx512fma {
namespace {  // internal linkage: compiled per ISA

constexpr int kNR = 32;

// f(std::integral_constant<int, 0>{}), ..., f(std::integral_constant<int, N - 1>{}).
template <class F, int... I>
inline void each_k(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}

// The high 16 bits of each 32-bit word at p, low halves zero: the odd k's fp32 weights of a
// bf16p32x2 k pair. Natively a zero-masking 16-bit load (no shift, no and); SIMDe 0.7.4 has
// no masked loads: an and.
inline __m512 high_halves(const void* p) {
#if defined(CPUKERN_SIMDE)
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_loadu_si512(p), _mm512_set1_epi32(int32_t(0xFFFF0000u))));
#else
  return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(__mmask32(0xAAAAAAAAu), p));
#endif
}

// A weight source reads one panel in units of kKUnit k (kUnitsPerBlock > 0: block(b) is called
// before the units of block b), and gives the fp32 weights of k q of unit u for columns 0-15
// and 16-31 (weights<q>(u, w0, w1)).
//
// bf16 weights: the panel's 32-bit words [k pair][32 columns] (pack_kpairs<32>, the same
// "bf16p32x2" bytes as the avx512_bf16 row's).
struct Bf16Src {
  static constexpr int kKUnit = 2, kUnitsPerBlock = 0;
  const uint32_t* w;
  explicit Bf16Src(const void* p) : w(static_cast<const uint32_t*>(p)) {}
  void block(int64_t) {}
  const char* at(int64_t u) const { return reinterpret_cast<const char*>(w + u * kNR); }
  template <int Q>
  void weights(int64_t u, __m512& w0, __m512& w1) const {
    const uint32_t* p = w + u * kNR;
    if constexpr (Q == 0) {
      w0 = _mm512_castsi512_ps(cpukern_slli_epi32(_mm512_loadu_si512(p), 16));
      w1 = _mm512_castsi512_ps(cpukern_slli_epi32(_mm512_loadu_si512(p + 16), 16));
    } else {
      w0 = high_halves(p);
      w1 = high_halves(p + 16);
    }
  }
};

// Exact fp32 weights [k][32 columns] (an MXFP4 panel decoded once per K block for prefill:
// avx512_fma_mxfp4.h), read as they are.
struct F32Src {
  static constexpr int kKUnit = 2, kUnitsPerBlock = 0;
  const float* w;
  explicit F32Src(const void* p) : w(static_cast<const float*>(p)) {}
  void block(int64_t) {}
  const char* at(int64_t u) const { return reinterpret_cast<const char*>(w + u * 2 * kNR); }
  template <int Q>
  void weights(int64_t u, __m512& w0, __m512& w1) const {
    w0 = _mm512_loadu_ps(w + (u * 2 + Q) * kNR);
    w1 = _mm512_loadu_ps(w + (u * 2 + Q) * kNR + 16);
  }
};

// C[M][NP * 32] (= or +=) `units` units of A (M rows of stride kp, fp32) x the weights of NP
// panels (src[j], each from a block start); pf > 0: prefetch pf bytes ahead of the weights.
// Every C element is one FMA chain in k order, the same for every M and NP (batch-invariant);
// the chains are independent across rows and panels.
template <int M, int NP, class Src>
inline void fma_tile(const float* a, int64_t kp, int64_t units, Src* src, float* c, int64_t ldc,
                     bool accumulate, int64_t pf) {
  constexpr int KU = Src::kKUnit, UB = Src::kUnitsPerBlock;
  __m512 c0[NP][M], c1[NP][M];
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    c0[j][r] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * kNR) : _mm512_setzero_ps();
    c1[j][r] = accumulate ? _mm512_loadu_ps(c + r * ldc + j * kNR + 16) : _mm512_setzero_ps();
  }
  // One pointer per row: indexed as a[r * kp + k], GCC 12 kept an offset per (row, k) on the
  // stack and reloaded one per broadcast.
  const float* ar[M];
  CPUKERN_UNROLL for (int r = 0; r < M; ++r) ar[r] = a + r * kp;
  for (int64_t u = 0; u < units; ++u) {
    if constexpr (UB > 0)
      if (u % UB == 0)
        CPUKERN_UNROLL for (int j = 0; j < NP; ++j) src[j].block(u / UB);
    if (pf) {
      CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
        const char* q = src[j].at(u) + pf;
        _mm_prefetch(q, _MM_HINT_T0);
        _mm_prefetch(q + 64, _MM_HINT_T0);
      }
    }
    each_k(
        [&](auto q) {
          constexpr int Q = decltype(q)::value;
          CPUKERN_UNROLL for (int j = 0; j < NP; ++j) {
            __m512 w0, w1;
            src[j].template weights<Q>(u, w0, w1);
            CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
              const __m512 av = _mm512_set1_ps(ar[r][u * KU + Q]);
              c0[j][r] = _mm512_fmadd_ps(av, w0, c0[j][r]);
              c1[j][r] = _mm512_fmadd_ps(av, w1, c1[j][r]);
            }
          }
        },
        std::make_integer_sequence<int, KU>());
  }
  CPUKERN_UNROLL for (int j = 0; j < NP; ++j) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    _mm512_storeu_ps(c + r * ldc + j * kNR, c0[j][r]);
    _mm512_storeu_ps(c + r * ldc + j * kNR + 16, c1[j][r]);
  }
}

// Tile traits over a weight source: the bf16 kernel (Bf16Src), the MXFP4 kernel
// (avx512_fma_mxfp4.h: its source in registers, F32Src over the prefill's decoded weights).
template <class Src>
struct Tile : KpairsTile<kNR> {
  // One row block (decode): up to 4 panels per call (G below).
  static constexpr int kMR = 8, kActW = 16, kNPGemv = 4;
  // Decode: the avx512_bf16 tile's prefetch distance (measured there on Zen 5; unmeasured here).
  static constexpr int kPrefetchGemv = 2048;
  static constexpr bool kBlockK = true;
  using A = float;  // rows pre-widened to fp32
  // Equal row blocks of at most kMR (9 = 5 + 4, not 8 + 1).
  static int64_t rows(int64_t rem) {
    const int64_t nb = (rem + kMR - 1) / kMR;
    return (rem + nb - 1) / nb;
  }
  static constexpr auto pack_a = pack_a_f32<kKR>;
  template <int M, class WT>
  static void tile(const float* a, int64_t lda, int64_t nk, const WT* w, int64_t panel, int np,
                   float* c, int64_t ldc, bool accumulate, int64_t pf) {
    // nk k steps: k pairs (bf16, fp32) or 32-k blocks (MXFP4).
    const int64_t units = nk * (Src::kUnitsPerBlock ? Src::kUnitsPerBlock : 1);
    // Panels per call: 8-12 independent chains (2 per row and panel) from 1-3 rows.
    constexpr int G = M == 1 ? 4 : M <= 3 ? 2 : 1;
    panel_groups<G>(np, [&](auto g, int j) {
      auto src = sources<Src>(w + j * panel, panel, std::make_index_sequence<g>());
      fma_tile<M, g>(a, lda, units, src.data(), c + j * kNR, ldc, accumulate, pf);
    });
  }
};

}  // namespace
}  // namespace cpukern::moe::avx512fma
