// AArch64 NEON micro-kernel for CPUs without BF16: bf16 weights widened to fp32 in registers
// (one 32-bit word holds the k and k+1 weights of a column: `<< 16` gives the first, `& 0xffff0000`
// the second), A rows pre-widened to fp32, FMA by lane; 4 rows x 16 columns. 1-2 rows (decode)
// keep separate even/odd-k accumulators to hide the FMA latency.
#include <arm_neon.h>

#include <algorithm>

#include "kernels/moe/activations.h"
#include "kernels/moe/ukernel.h"
#include "kernels/moe/ukernels/pack_kpairs.h"

namespace cpukern::moe {
namespace {

constexpr int kMR = 4, kNR = 16, kKR = 2;

int64_t packed_size(int64_t o, int64_t i) {
  return (o + kNR - 1) / kNR * kNR * round_up(i, kKR) * 2;
}
void pack(const bf16_t* w, int64_t o, int64_t i, void* dst) {
  pack_kpairs<kNR>(w, o, i, round_up(i, kKR), dst);
}
// A rows fp32 [m][round_up(k, 4)] so that one vector holds two k pairs.
int64_t packed_a_size(int64_t m, int64_t k) { return m * round_up(k, 4) * 4; }
void pack_a(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k, void* dst) {
  pack_a_f32(a, lda, rows, m, k, round_up(k, 4), static_cast<float*>(dst));
}

// GCC keeps per-row accumulator arrays in registers only when the row loops are unrolled
// before scalar replacement; without the pragma it spills them to the stack every k step.
#define CPUKERN_UNROLL _Pragma("GCC unroll 16")

template <int M, bool kDual>
inline void tile(const float* a, int64_t lda, int64_t kh, const uint32_t* w, float* c,
                 int64_t ldc, bool accumulate) {
  const uint32x4_t mask = vdupq_n_u32(0xffff0000u);
  float32x4_t acc[M][4], odd[kDual ? M : 1][4];
  CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
      acc[r][q] = accumulate ? vld1q_f32(c + r * ldc + 4 * q) : vdupq_n_f32(0.0f);
      if (kDual) odd[r][q] = vdupq_n_f32(0.0f);
    }
  auto step = [&](const uint32_t* wk, const float32x4_t* av, auto lane_pair) {
    constexpr int L = decltype(lane_pair)::value;
    float32x4_t lo[4], hi[4];
    CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
      const uint32x4_t v = vld1q_u32(wk + 4 * q);
      lo[q] = vreinterpretq_f32_u32(vshlq_n_u32(v, 16));
      hi[q] = vreinterpretq_f32_u32(vandq_u32(v, mask));
    }
    CPUKERN_UNROLL for (int r = 0; r < M; ++r)
      CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
        acc[r][q] = vfmaq_laneq_f32(acc[r][q], lo[q], av[r], 2 * L);
        if constexpr (kDual)
          odd[r][q] = vfmaq_laneq_f32(odd[r][q], hi[q], av[r], 2 * L + 1);
        else
          acc[r][q] = vfmaq_laneq_f32(acc[r][q], hi[q], av[r], 2 * L + 1);
      }
  };
  int64_t kk = 0;
  for (; kk + 2 <= kh; kk += 2) {
    float32x4_t av[M];
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) av[r] = vld1q_f32(a + r * lda + 2 * kk);
    step(w + kk * kNR, av, std::integral_constant<int, 0>());
    step(w + (kk + 1) * kNR, av, std::integral_constant<int, 1>());
  }
  if (kk < kh) {  // last pair: the A rows are zero-padded to a multiple of 4
    float32x4_t av[M];
    CPUKERN_UNROLL for (int r = 0; r < M; ++r) av[r] = vld1q_f32(a + r * lda + 2 * kk);
    step(w + kk * kNR, av, std::integral_constant<int, 0>());
  }
  CPUKERN_UNROLL for (int r = 0; r < M; ++r)
    CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
      float32x4_t v = acc[r][q];
      if constexpr (kDual) v = vaddq_f32(v, odd[r][q]);
      vst1q_f32(c + r * ldc + 4 * q, v);
    }
}

void gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0, int64_t p1,
          float* c, int64_t ldc, bool accumulate) {
  const float* a = static_cast<const float*>(a_packed);
  const int64_t kp = round_up(k, kKR), lda = round_up(k, 4), kh = kp / 2;
  const uint32_t* wp = static_cast<const uint32_t*>(w);
  for (int64_t p = p0; p < p1; ++p) {
    const uint32_t* panel = wp + p * kNR * kh;
    float* cp = c + (p - p0) * kNR;
    for (int64_t r = 0; r < m; r += kMR) {
      const float* ar = a + r * lda;
      float* cr = cp + r * ldc;
      switch (std::min<int64_t>(kMR, m - r)) {
        case 1: tile<1, true>(ar, lda, kh, panel, cr, ldc, accumulate); break;
        case 2: tile<2, true>(ar, lda, kh, panel, cr, ldc, accumulate); break;
        case 3: tile<3, false>(ar, lda, kh, panel, cr, ldc, accumulate); break;
        default: tile<4, false>(ar, lda, kh, panel, cr, ldc, accumulate); break;
      }
    }
  }
}

void activation(Activation act, int64_t m, int64_t n, const float* g, const float* u, int64_t ldc,
                bool interleaved, const bf16_t* bg, const bf16_t* bu, bf16_t* out, int64_t ldo) {
  act::activation_rows<4>(act, m, n, g, u, ldc, interleaved, bg, bu, out, ldo);
}

}  // namespace

const Ukernel kUkernelNeonFma = {
    "moe_gemm_f32_f32_bf16p16x2_4x16__neon_fma", "bf16p16x2", kMR, kNR, kKR,
    packed_size, pack, packed_a_size, pack_a, gemm, activation,
};

}  // namespace cpukern::moe
