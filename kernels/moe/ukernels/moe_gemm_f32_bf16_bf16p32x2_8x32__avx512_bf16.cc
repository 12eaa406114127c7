// AVX-512 BF16 micro-kernel on vdpbf16ps: each 32-bit lane of a weight vector is the pair
// (w[col][k], w[col][k+1]); the matching A pair is broadcast, and one instruction accumulates
// both products into the column's fp32 lane. 8 rows x 32 columns (16 zmm accumulators);
// up to 4 rows use two accumulator sets (even / odd k pairs) to hide the latency.
#include <immintrin.h>

#include <cstring>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/pack_kpairs.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {
namespace {

constexpr int kNR = 32;

// A rows stay bf16, [m][kp], zero past k.
void pack_a(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k, void* dst) {
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

template <int M>
inline void dp_tile(const bf16_t* a, int64_t kp, int64_t kh, const uint32_t* w, float* c,
                    int64_t ldc, bool accumulate, int64_t pf) {
  // a: M rows of stride kp; kh k pairs; w: the panel's words from the first of those pairs;
  // pf > 0: prefetch the weights pf bytes ahead (the next K block, while this one is reused).
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
        const char* q = reinterpret_cast<const char*>(wk) + pf;
        CPUKERN_UNROLL for (int l = 0; l < 4; ++l) _mm_prefetch(q + 64 * l, _MM_HINT_T0);
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
      const char* q = reinterpret_cast<const char*>(w + kk * kNR) + pf;
      _mm_prefetch(q, _MM_HINT_T0);
      _mm_prefetch(q + 64, _MM_HINT_T0);
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

struct Tile : KpairsTile<kNR> {
  static constexpr int kMR = 8, kActW = 16;
  static constexpr bool kBlockK = true;
  using A = bf16_t;
  // Equal row blocks of at most kMR (9 = 5 + 4, not 8 + 1).
  static int64_t rows(int64_t rem) {
    const int64_t nb = (rem + kMR - 1) / kMR;
    return (rem + nb - 1) / nb;
  }
  static constexpr auto pack_a = moe::pack_a;
  template <int M>
  static void tile(const bf16_t* a, int64_t lda, int64_t nk, const bf16_t* w, int64_t, int,
                   float* c, int64_t ldc, bool accumulate, int64_t pf) {
    dp_tile<M>(a, lda, nk, reinterpret_cast<const uint32_t*>(w), c, ldc, accumulate, pf);
  }
};

}  // namespace

const Ukernel moe_gemm_f32_bf16_bf16p32x2_8x32__avx512_bf16 =
    make_ukernel<Tile>("moe_gemm_f32_bf16_bf16p32x2_8x32__avx512_bf16", "bf16p32x2");

}  // namespace cpukern::moe
