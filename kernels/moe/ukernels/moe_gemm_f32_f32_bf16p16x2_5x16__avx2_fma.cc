// AVX2 + FMA micro-kernel: bf16 weights widened to fp32 in registers (one 32-bit word holds
// the k and k+1 weights of a column: `<< 16` gives the first as fp32, `& 0xffff0000` the
// second), A rows pre-widened to fp32 and broadcast, 5 rows x 16 columns of fp32 accumulators
// (6 rows measured slower: 12 accumulators + operands exceed the 16 registers and GCC spills).
// For 1-2 rows (decode) separate even/odd-k accumulators break the FMA latency chain, so the
// kernel streams weights as a bf16 GEMV at memory bandwidth.
#include <immintrin.h>

#include <algorithm>

#include "kernels/moe/activations.h"
#include "kernels/moe/ukernel.h"
#include "kernels/moe/ukernels/pack_kpairs.h"

namespace cpukern::moe {
namespace {

constexpr int kMR = 5, kNR = 16, kKR = 2;

int64_t packed_size(int64_t o, int64_t i) {
  return (o + kNR - 1) / kNR * kNR * round_up(i, kKR) * 2;
}
void pack(const bf16_t* w, int64_t o, int64_t i, void* dst) {
  pack_kpairs<kNR>(w, o, i, round_up(i, kKR), dst);
}
int64_t packed_a_size(int64_t m, int64_t k) { return m * round_up(k, kKR) * 4; }
void pack_a(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k, void* dst) {
  pack_a_f32(a, lda, rows, m, k, round_up(k, kKR), static_cast<float*>(dst));
}

// GCC keeps per-row accumulator arrays in registers only when the row loops are unrolled
// before scalar replacement; without the pragma it spills them to the stack every k step.
#define CPUKERN_UNROLL _Pragma("GCC unroll 16")

// The pointer, hidden from the optimiser: a second load of the same weights is then not merged
// with the first, so the odd-k operand comes from `vpand reg, mask, [mem]` and the raw words
// never occupy registers (16 ymm: 2M accumulators + 2 operands + broadcast + mask).
template <class T>
inline const T* launder_ptr(const T* p) {
  asm("" : "+r"(p));
  return p;
}

// PF: prefetch the weights pf words ahead (one 64-byte line per k pair), so that the next K
// block streams in from memory while every row block computes on this one.
template <int M, bool PF>
inline void tile(const float* a, int64_t kp, int64_t kh, const uint32_t* w, float* c,
                 int64_t ldc, bool accumulate, int64_t pf = 0) {
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
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(w + kk * kNR + pf), _MM_HINT_T0);
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
      if constexpr (PF) _mm_prefetch(reinterpret_cast<const char*>(wk + pf), _MM_HINT_T0);
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

// K block: 16 columns x 2 * kKh k of weights (8 KiB) stay in L1 while every row block of the
// chunk uses them, so a panel streams from memory once however many rows the expert has.
constexpr int64_t kKh = 128;

void gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0, int64_t p1,
          float* c, int64_t ldc, bool accumulate) {
  const float* a = static_cast<const float*>(a_packed);
  const int64_t kp = round_up(k, kKR), kh = kp / 2;
  const uint32_t* wp = static_cast<const uint32_t*>(w);
  // One row block: no K blocking (a decode GEMV streams the panel in one pass).
  const int64_t kb = m <= kMR ? kh : kKh;
  for (int64_t p = p0; p < p1; ++p) {
    const uint32_t* panel = wp + p * kNR * kh;
    float* cp = c + (p - p0) * kNR;
    for (int64_t k0 = 0; k0 < kh; k0 += kb) {
      const int64_t nk = std::min(kb, kh - k0);
      const uint32_t* wk = panel + k0 * kNR;
      const bool acc = accumulate || k0 > 0;
      for (int64_t r = 0, mb; r < m; r += mb) {
        // Row blocks of 5 (10 accumulators; 6 rows spill on 16 registers), 4 where that avoids
        // a slow 1- or 3-row tail: 6 = 4 + 2, 8 = 4 + 4, 7 = 5 + 2, 12 = 5 + 5 + 2.
        const int64_t rem = m - r;
        mb = rem <= kMR ? rem : (rem == 6 || rem == 8) ? 4 : kMR;
        const float* ar = a + r * kp + 2 * k0;
        float* cr = cp + r * ldc;
        if (kb < kh) {  // K-blocked: prefetch the next block (spread over the row blocks)
          switch (mb) {
            case 1: tile<1, true>(ar, kp, nk, wk, cr, ldc, acc, kb * kNR); break;
            case 2: tile<2, true>(ar, kp, nk, wk, cr, ldc, acc, kb * kNR); break;
            case 3: tile<3, true>(ar, kp, nk, wk, cr, ldc, acc, kb * kNR); break;
            case 4: tile<4, true>(ar, kp, nk, wk, cr, ldc, acc, kb * kNR); break;
            default: tile<5, true>(ar, kp, nk, wk, cr, ldc, acc, kb * kNR); break;
          }
        } else {  // one pass: the hardware prefetcher keeps up with a plain stream
          switch (mb) {
            case 1: tile<1, false>(ar, kp, nk, wk, cr, ldc, acc); break;
            case 2: tile<2, false>(ar, kp, nk, wk, cr, ldc, acc); break;
            case 3: tile<3, false>(ar, kp, nk, wk, cr, ldc, acc); break;
            case 4: tile<4, false>(ar, kp, nk, wk, cr, ldc, acc); break;
            default: tile<5, false>(ar, kp, nk, wk, cr, ldc, acc); break;
          }
        }
      }
    }
  }
}

void activation(Activation act, int64_t m, int64_t n, const float* g, const float* u, int64_t ldc,
                bool interleaved, const bf16_t* bg, const bf16_t* bu, bf16_t* out, int64_t ldo) {
  act::activation_rows<8>(act, m, n, g, u, ldc, interleaved, bg, bu, out, ldo);
}

}  // namespace

const Ukernel kUkernelAvx2Fma = {
    "moe_gemm_f32_f32_bf16p16x2_5x16__avx2_fma", "bf16p16x2", kMR, kNR, kKR,
    packed_size, pack, packed_a_size, pack_a, gemm, activation,
};

}  // namespace cpukern::moe
