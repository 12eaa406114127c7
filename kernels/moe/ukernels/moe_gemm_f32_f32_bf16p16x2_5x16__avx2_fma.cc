// AVX2 + FMA micro-kernel: bf16 weights widened to fp32 in registers (one 32-bit word holds
// the k and k+1 weights of a column: `<< 16` gives the first as fp32, `& 0xffff0000` the
// second), A rows pre-widened to fp32 and broadcast, 5 rows x 16 columns of fp32 accumulators
// (6 rows measured slower: 12 accumulators + operands exceed the 16 registers and GCC spills).
// For 1-2 rows (decode) separate even/odd-k accumulators break the FMA latency chain, so the
// kernel streams weights as a bf16 GEMV at memory bandwidth.
#include <immintrin.h>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/pack_kpairs.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {
namespace {

constexpr int kNR = 16;

// The pointer, hidden from the optimiser: a second load of the same weights is then not merged
// with the first, so the odd-k operand comes from `vpand reg, mask, [mem]` and the raw words
// never occupy registers (16 ymm: 2M accumulators + 2 operands + broadcast + mask).
template <class T>
inline const T* launder_ptr(const T* p) {
  asm("" : "+r"(p));
  return p;
}

// PF: prefetch the weights pf bytes ahead (one 64-byte line per k pair), so that the next K
// block streams in from memory while every row block computes on this one.
template <int M, bool PF>
inline void fma_tile(const float* a, int64_t kp, int64_t kh, const uint32_t* w, float* c,
                 int64_t ldc, bool accumulate, int64_t pf) {
  // a: M rows of stride kp; kh k pairs; w: the panel's words from the first of those pairs.
  const __m256i hi_mask = _mm256_set1_epi32(int(0xffff0000u));
  if constexpr (M <= 2) {
    // Decode: even and odd k in separate accumulators, and for one row two k pairs per step:
    // 8 independent FMA chains, so the loop streams weights instead of waiting on FMA latency.
    constexpr int U = M == 1 ? 2 : 1;
    __m256 e0[U][M], e1[U][M], o0[U][M], o1[U][M];
    CPUKERN_UNROLL for (int u = 0; u < U; ++u) CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      e0[u][r] = e1[u][r] = o0[u][r] = o1[u][r] = _mm256_setzero_ps();
    }
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) if (accumulate) {
      e0[0][r] = _mm256_loadu_ps(c + r * ldc);
      e1[0][r] = _mm256_loadu_ps(c + r * ldc + 8);
    }
    auto step = [&](int u, int64_t kk) {
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(w + kk * kNR) + pf, _MM_HINT_T0);
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kk * kNR));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kk * kNR + 8));
      const __m256 l0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
      const __m256 l1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
      const __m256 h0 = _mm256_castsi256_ps(_mm256_and_si256(w0, hi_mask));
      const __m256 h1 = _mm256_castsi256_ps(_mm256_and_si256(w1, hi_mask));
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        const __m256 ae = _mm256_broadcast_ss(a + r * kp + 2 * kk);
        const __m256 ao = _mm256_broadcast_ss(a + r * kp + 2 * kk + 1);
        e0[u][r] = _mm256_fmadd_ps(ae, l0, e0[u][r]);
        e1[u][r] = _mm256_fmadd_ps(ae, l1, e1[u][r]);
        o0[u][r] = _mm256_fmadd_ps(ao, h0, o0[u][r]);
        o1[u][r] = _mm256_fmadd_ps(ao, h1, o1[u][r]);
      }
    };
    int64_t kk = 0;
    if constexpr (U == 2) {
      for (; kk + 2 <= kh; kk += 2) {
        step(0, kk);
        step(1, kk + 1);
      }
    }
    for (; kk < kh; ++kk) step(0, kk);
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      __m256 s0 = _mm256_add_ps(e0[0][r], o0[0][r]), s1 = _mm256_add_ps(e1[0][r], o1[0][r]);
      if constexpr (U == 2) {
        s0 = _mm256_add_ps(s0, _mm256_add_ps(e0[1][r], o0[1][r]));
        s1 = _mm256_add_ps(s1, _mm256_add_ps(e1[1][r], o1[1][r]));
      }
      _mm256_storeu_ps(c + r * ldc, s0);
      _mm256_storeu_ps(c + r * ldc + 8, s1);
    }
  } else {
    __m256 c0[M], c1[M];
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      c0[r] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
      c1[r] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (int64_t kk = 0; kk < kh; ++kk) {
      const uint32_t* wk = w + kk * kNR;
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(wk) + pf, _MM_HINT_T0);
      const __m256 l0 = _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wk)), 16));
      const __m256 l1 = _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wk + 8)), 16));
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        const __m256 ae = _mm256_broadcast_ss(a + r * kp + 2 * kk);
        c0[r] = _mm256_fmadd_ps(ae, l0, c0[r]);
        c1[r] = _mm256_fmadd_ps(ae, l1, c1[r]);
      }
      const uint32_t* wq = launder_ptr(wk);
      const __m256 h0 = _mm256_castsi256_ps(
          _mm256_and_si256(hi_mask, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq))));
      const __m256 h1 = _mm256_castsi256_ps(
          _mm256_and_si256(hi_mask, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 8))));
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        const __m256 ao = _mm256_broadcast_ss(a + r * kp + 2 * kk + 1);
        c0[r] = _mm256_fmadd_ps(ao, h0, c0[r]);
        c1[r] = _mm256_fmadd_ps(ao, h1, c1[r]);
      }
    }
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      _mm256_storeu_ps(c + r * ldc, c0[r]);
      _mm256_storeu_ps(c + r * ldc + 8, c1[r]);
    }
  }
}

struct Tile : KpairsTile<kNR> {
  static constexpr int kMR = 5, kActW = 8;
  static constexpr bool kBlockK = true;
  using A = float;  // rows pre-widened to fp32
  // Row blocks of 5 (10 accumulators; 6 rows spill on 16 registers), 4 where that avoids a
  // slow 1- or 3-row tail: 6 = 4 + 2, 8 = 4 + 4, 7 = 5 + 2, 12 = 5 + 5 + 2.
  static int64_t rows(int64_t rem) { return rem <= kMR ? rem : (rem == 6 || rem == 8) ? 4 : kMR; }
  static constexpr auto pack_a = pack_a_f32<kKR>;
  template <int M>
  static void tile(const float* a, int64_t lda, int64_t nk, const bf16_t* w, int64_t, int,
                   float* c, int64_t ldc, bool accumulate, int64_t pf) {
    const auto* wq = reinterpret_cast<const uint32_t*>(w);
    if (pf)
      fma_tile<M, true>(a, lda, nk, wq, c, ldc, accumulate, pf);
    else
      fma_tile<M, false>(a, lda, nk, wq, c, ldc, accumulate, 0);
  }
};

}  // namespace

const Ukernel moe_gemm_f32_f32_bf16p16x2_5x16__avx2_fma =
    make_ukernel<Tile>("moe_gemm_f32_f32_bf16p16x2_5x16__avx2_fma", "bf16p16x2");

}  // namespace cpukern::moe
