// AArch64 NEON micro-kernel for CPUs without BF16: bf16 weights widened to fp32 in registers
// (one 32-bit word holds the k and k+1 weights of a column: `<< 16` gives the first, `& 0xffff0000`
// the second), A rows pre-widened to fp32, FMA by lane; 4 rows x 16 columns. 1-2 rows (decode)
// keep separate even/odd-k accumulators to hide the FMA latency.
#include <arm_neon.h>

#include <type_traits>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/ukernels/pack_kpairs.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {
namespace {

constexpr int kNR = 16;

template <int M, bool kDual>
inline void fma_tile(const float* a, int64_t lda, int64_t kh, const uint32_t* w, float* c,
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

struct Tile : KpairsTile<kNR> {
  static constexpr int kMR = 4, kActW = 4;
  using A = float;  // rows fp32 [m][round_up(k, 4)]: one vector holds two k pairs
  static int64_t a_stride(int64_t k) { return round_up(k, 4); }
  static int64_t rows(int64_t rem) { return std::min<int64_t>(kMR, rem); }
  static constexpr auto pack_a = pack_a_f32<4>;
  template <int M>
  static void tile(const float* a, int64_t lda, int64_t nk, const bf16_t* w, int64_t, int,
                   float* c, int64_t ldc, bool accumulate, int64_t) {
    fma_tile<M, (M <= 2)>(a, lda, nk, reinterpret_cast<const uint32_t*>(w), c, ldc, accumulate);
  }
};

}  // namespace

const Ukernel moe_gemm_f32_f32_bf16p16x2_4x16__neon_fma =
    make_ukernel<Tile>("moe_gemm_f32_f32_bf16p16x2_4x16__neon_fma", "bf16p16x2");

}  // namespace cpukern::moe
