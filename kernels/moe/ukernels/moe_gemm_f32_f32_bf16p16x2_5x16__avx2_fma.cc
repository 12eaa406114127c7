// AVX2 + FMA micro-kernel: bf16 weights widened to fp32 in registers (one 32-bit word holds
// the k and k+1 weights of a column: `<< 16` gives the first as fp32, `& 0xffff0000` the
// second), A rows pre-widened to fp32 and broadcast, 6 rows x 16 columns of fp32 accumulators.
// For 1-2 rows (decode) separate even/odd-k accumulators break the FMA latency chain, so the
// kernel streams weights as a bf16 GEMV at memory bandwidth.
#include <immintrin.h>

#include "kernels/moe/activations.h"
#include "kernels/moe/ukernel.h"
#include "kernels/moe/ukernels/pack_kpairs.h"

namespace cpukern::moe {
namespace {

constexpr int kMR = 6, kNR = 16, kKR = 2;

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

template <int M>
inline void tile(const float* a, int64_t kp, const uint32_t* w, float* c, int64_t ldc,
                 bool accumulate) {
  const __m256i hi_mask = _mm256_set1_epi32(int(0xffff0000u));
  const int64_t kh = kp / 2;
  if constexpr (M <= 2) {
    __m256 e0[M], e1[M], o0[M], o1[M];
    for (int r = 0; r < M; ++r) {
      e0[r] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
      e1[r] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
      o0[r] = _mm256_setzero_ps();
      o1[r] = _mm256_setzero_ps();
    }
    for (int64_t kk = 0; kk < kh; ++kk) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kk * kNR));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kk * kNR + 8));
      const __m256 l0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
      const __m256 l1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
      const __m256 h0 = _mm256_castsi256_ps(_mm256_and_si256(w0, hi_mask));
      const __m256 h1 = _mm256_castsi256_ps(_mm256_and_si256(w1, hi_mask));
      for (int r = 0; r < M; ++r) {
        const __m256 ae = _mm256_broadcast_ss(a + r * kp + 2 * kk);
        const __m256 ao = _mm256_broadcast_ss(a + r * kp + 2 * kk + 1);
        e0[r] = _mm256_fmadd_ps(ae, l0, e0[r]);
        e1[r] = _mm256_fmadd_ps(ae, l1, e1[r]);
        o0[r] = _mm256_fmadd_ps(ao, h0, o0[r]);
        o1[r] = _mm256_fmadd_ps(ao, h1, o1[r]);
      }
    }
    for (int r = 0; r < M; ++r) {
      _mm256_storeu_ps(c + r * ldc, _mm256_add_ps(e0[r], o0[r]));
      _mm256_storeu_ps(c + r * ldc + 8, _mm256_add_ps(e1[r], o1[r]));
    }
  } else {
    __m256 c0[M], c1[M];
    for (int r = 0; r < M; ++r) {
      c0[r] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
      c1[r] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
    }
    for (int64_t kk = 0; kk < kh; ++kk) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kk * kNR));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kk * kNR + 8));
      const __m256 l0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
      const __m256 l1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
      for (int r = 0; r < M; ++r) {
        const __m256 ae = _mm256_broadcast_ss(a + r * kp + 2 * kk);
        c0[r] = _mm256_fmadd_ps(ae, l0, c0[r]);
        c1[r] = _mm256_fmadd_ps(ae, l1, c1[r]);
      }
      const __m256 h0 = _mm256_castsi256_ps(_mm256_and_si256(w0, hi_mask));
      const __m256 h1 = _mm256_castsi256_ps(_mm256_and_si256(w1, hi_mask));
      for (int r = 0; r < M; ++r) {
        const __m256 ao = _mm256_broadcast_ss(a + r * kp + 2 * kk + 1);
        c0[r] = _mm256_fmadd_ps(ao, h0, c0[r]);
        c1[r] = _mm256_fmadd_ps(ao, h1, c1[r]);
      }
    }
    for (int r = 0; r < M; ++r) {
      _mm256_storeu_ps(c + r * ldc, c0[r]);
      _mm256_storeu_ps(c + r * ldc + 8, c1[r]);
    }
  }
}

void gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0, int64_t p1,
          float* c, int64_t ldc, bool accumulate) {
  const float* a = static_cast<const float*>(a_packed);
  const int64_t kp = round_up(k, kKR);
  const uint32_t* wp = static_cast<const uint32_t*>(w);
  for (int64_t p = p0; p < p1; ++p) {
    const uint32_t* panel = wp + p * kNR * kp / 2;
    float* cp = c + (p - p0) * kNR;
    for (int64_t r = 0, mb; r < m; r += mb) {
      // 7..11 remaining rows split evenly (8 = 4 + 4, not 6 + 2: a 2-row tile runs at half rate).
      const int64_t rem = m - r;
      mb = rem > kMR && rem < 2 * kMR ? (rem + 1) / 2 : std::min<int64_t>(kMR, rem);
      const float* ar = a + r * kp;
      float* cr = cp + r * ldc;
      switch (mb) {
        case 1: tile<1>(ar, kp, panel, cr, ldc, accumulate); break;
        case 2: tile<2>(ar, kp, panel, cr, ldc, accumulate); break;
        case 3: tile<3>(ar, kp, panel, cr, ldc, accumulate); break;
        case 4: tile<4>(ar, kp, panel, cr, ldc, accumulate); break;
        case 5: tile<5>(ar, kp, panel, cr, ldc, accumulate); break;
        default: tile<6>(ar, kp, panel, cr, ldc, accumulate); break;
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
    "moe_gemm_f32_f32_bf16p16x2_6x16__avx2_fma", "bf16p16x2", kMR, kNR, kKR,
    packed_size, pack, packed_a_size, pack_a, gemm, activation,
};

}  // namespace cpukern::moe
