// AVX-512 BF16 micro-kernel on vdpbf16ps: each 32-bit lane of a weight vector is the pair
// (w[col][k], w[col][k+1]); the matching A pair is broadcast, and one instruction accumulates
// both products into the column's fp32 lane. 8 rows x 32 columns (16 zmm accumulators);
// up to 4 rows use two accumulator sets (even / odd k pairs) to hide the latency.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/moe/activations.h"
#include "kernels/moe/ukernel.h"
#include "kernels/moe/ukernels/pack_kpairs.h"

namespace cpukern::moe {
namespace {

constexpr int kMR = 8, kNR = 32, kKR = 2;

int64_t packed_size(int64_t o, int64_t i) {
  return (o + kNR - 1) / kNR * kNR * round_up(i, kKR) * 2;
}
void pack(const bf16_t* w, int64_t o, int64_t i, void* dst) {
  pack_kpairs<kNR>(w, o, i, round_up(i, kKR), dst);
}
// A rows stay bf16, [m][kp], zero past k.
int64_t packed_a_size(int64_t m, int64_t k) { return m * round_up(k, kKR) * 2; }
void pack_a(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k, void* dst) {
  const int64_t kp = round_up(k, kKR);
  bf16_t* d = static_cast<bf16_t*>(dst);
  for (int64_t r = 0; r < m; ++r) {
    const bf16_t* src = a + (rows ? int64_t(rows[r]) : r) * lda;
    std::memcpy(d + r * kp, src, size_t(k) * 2);
    for (int64_t j = k; j < kp; ++j) d[r * kp + j] = 0;
  }
}

// GCC keeps the per-row accumulator arrays in registers only when the row loops are unrolled
// before scalar replacement; without the pragma it spills them to the stack every k step.
#define CPUKERN_UNROLL _Pragma("GCC unroll 16")

inline __m512 dp(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}
inline __m512i bcast_pair(const bf16_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

template <int M>
inline void tile(const bf16_t* a, int64_t kp, int64_t kh, const uint32_t* w, float* c,
                 int64_t ldc, bool accumulate, int64_t pf) {
  // a: M rows of stride kp; kh k pairs; w: the panel's words from the first of those pairs;
  // pf > 0: prefetch the weights pf words ahead (the next K block, while this one is reused).
  __m512 c0[M], c1[M];
  CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    c0[r] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    c1[r] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
  }
  int64_t kk = 0;
  if constexpr (M <= 4) {
    __m512 d0[M], d1[M];
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) d0[r] = d1[r] = _mm512_setzero_ps();
    for (; kk + 2 <= kh; kk += 2) {
      const uint32_t* wk = w + kk * kNR;
      if (pf) {
        _mm_prefetch(reinterpret_cast<const char*>(wk + pf), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wk + pf + 16), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wk + pf + 32), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(wk + pf + 48), _MM_HINT_T0);
      }
      const __m512i w0 = _mm512_loadu_si512(wk), w1 = _mm512_loadu_si512(wk + 16);
      const __m512i w2 = _mm512_loadu_si512(wk + 32), w3 = _mm512_loadu_si512(wk + 48);
      CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
        const __m512i ae = bcast_pair(a + r * kp + 2 * kk);
        const __m512i ao = bcast_pair(a + r * kp + 2 * kk + 2);
        c0[r] = dp(c0[r], ae, w0);
        c1[r] = dp(c1[r], ae, w1);
        d0[r] = dp(d0[r], ao, w2);
        d1[r] = dp(d1[r], ao, w3);
      }
    }
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      c0[r] = _mm512_add_ps(c0[r], d0[r]);
      c1[r] = _mm512_add_ps(c1[r], d1[r]);
    }
  }
  for (; kk < kh; ++kk) {
    if (pf) {
      _mm_prefetch(reinterpret_cast<const char*>(w + kk * kNR + pf), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w + kk * kNR + pf + 16), _MM_HINT_T0);
    }
    const __m512i w0 = _mm512_loadu_si512(w + kk * kNR);
    const __m512i w1 = _mm512_loadu_si512(w + kk * kNR + 16);
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
      const __m512i av = bcast_pair(a + r * kp + 2 * kk);
      c0[r] = dp(c0[r], av, w0);
      c1[r] = dp(c1[r], av, w1);
    }
  }
  CPUKERN_UNROLL for (int r = 0; r < M; ++r) {
    _mm512_storeu_ps(c + r * ldc, c0[r]);
    _mm512_storeu_ps(c + r * ldc + 16, c1[r]);
  }
}

// K block: 32 columns x 2 * kKh k of weights (16 KiB) stay in L1 while every row block of
// the chunk uses them, and the next block is prefetched meanwhile, so a panel streams from
// memory once, overlapped with the compute, however many rows the expert has.
constexpr int64_t kKh = 128;

void gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0, int64_t p1,
          float* c, int64_t ldc, bool accumulate) {
  const bf16_t* a = static_cast<const bf16_t*>(a_packed);
  const int64_t kp = round_up(k, kKR), kh = kp / 2;
  const uint32_t* wp = static_cast<const uint32_t*>(w);
  const int64_t kb = m <= kMR ? kh : kKh;  // one row block: one plain streaming pass
  const int64_t pf = kb < kh ? kb * kNR : 0;
  for (int64_t p = p0; p < p1; ++p) {
    const uint32_t* panel = wp + p * kNR * kh;
    float* cp = c + (p - p0) * kNR;
    for (int64_t k0 = 0; k0 < kh; k0 += kb) {
      const int64_t nk = std::min(kb, kh - k0);
      const uint32_t* wk = panel + k0 * kNR;
      const bool acc = accumulate || k0 > 0;
      for (int64_t r = 0, mb; r < m; r += mb) {
        // Equal row blocks of at most kMR (9 = 5 + 4, not 8 + 1).
        const int64_t rem = m - r, nb = (rem + kMR - 1) / kMR;
        mb = (rem + nb - 1) / nb;
        const bf16_t* ar = a + r * kp + 2 * k0;
        float* cr = cp + r * ldc;
        switch (mb) {
#define CPUKERN_TILE_CASE(M) \
  case M: tile<M>(ar, kp, nk, wk, cr, ldc, acc, pf); break;
          CPUKERN_TILE_CASE(1) CPUKERN_TILE_CASE(2) CPUKERN_TILE_CASE(3) CPUKERN_TILE_CASE(4)
          CPUKERN_TILE_CASE(5) CPUKERN_TILE_CASE(6) CPUKERN_TILE_CASE(7)
          default: tile<kMR>(ar, kp, nk, wk, cr, ldc, acc, pf); break;
#undef CPUKERN_TILE_CASE
        }
      }
    }
  }
}

void activation(Activation act, int64_t m, int64_t n, const float* g, const float* u, int64_t ldc,
                bool interleaved, const bf16_t* bg, const bf16_t* bu, bf16_t* out, int64_t ldo) {
  act::activation_rows<16>(act, m, n, g, u, ldc, interleaved, bg, bu, out, ldo);
}

}  // namespace

const Ukernel kUkernelAvx512Bf16 = {
    "moe_gemm_f32_bf16_bf16p32x2_8x32__avx512_bf16", "bf16p32x2", kMR, kNR, kKR,
    packed_size, pack, packed_a_size, pack_a, gemm, activation,
};

}  // namespace cpukern::moe
