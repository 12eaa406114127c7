// BFMMLA micro-kernel for panels of at most 4 rows (decode and ragged tails): 2 row pairs x
// 8 column pairs = 16 independent 2x2 accumulators over two 8-column weight panels.
#include "kernels/moe/ukernels/neon_bfmmla.h"

// GCC keeps accumulator arrays in registers only when their loops are unrolled before scalar
// replacement; without the pragma it stores them to the stack every k step.
#define CPUKERN_UNROLL _Pragma("GCC unroll 16")

namespace cpukern::moe::bfmmla {

template <int NP>
void kernel_4x16(const bfloat16_t* a, const bfloat16_t* w, int64_t kb, float* c, int64_t ldc,
                 int mrows, bool accumulate) {
  constexpr int NJ = 4 * NP;  // column pairs
  const int64_t panel = kb * 32;  // bf16 per weight panel
  float32x4_t acc[2][NJ];
  CPUKERN_UNROLL for (int q = 0; q < 2; ++q)
    CPUKERN_UNROLL for (int p = 0; p < NP; ++p)
      init_acc_rowpair(row_or_null(c + 8 * p, ldc, 2 * q, mrows),
                       row_or_null(c + 8 * p, ldc, 2 * q + 1, mrows), accumulate,
                       acc[q][4 * p], acc[q][4 * p + 1], acc[q][4 * p + 2], acc[q][4 * p + 3]);
  for (int64_t k = 0; k < kb; ++k) {
    const bfloat16x8_t a0 = vld1q_bf16(a + k * 32), a1 = vld1q_bf16(a + k * 32 + 8);
    CPUKERN_UNROLL for (int j = 0; j < NJ; ++j) {
      const bfloat16x8_t b = vld1q_bf16(w + (j / 4) * panel + k * 32 + (j % 4) * 8);
      acc[0][j] = vbfmmlaq_f32(acc[0][j], a0, b);
      acc[1][j] = vbfmmlaq_f32(acc[1][j], a1, b);
    }
  }
  CPUKERN_UNROLL for (int q = 0; q < 2; ++q)
    CPUKERN_UNROLL for (int p = 0; p < NP; ++p)
      store_acc_rowpair(row_or_null(c + 8 * p, ldc, 2 * q, mrows),
                        row_or_null(c + 8 * p, ldc, 2 * q + 1, mrows), acc[q][4 * p],
                        acc[q][4 * p + 1], acc[q][4 * p + 2], acc[q][4 * p + 3]);
}

template void kernel_4x16<1>(const bfloat16_t*, const bfloat16_t*, int64_t, float*, int64_t, int,
                             bool);
template void kernel_4x16<2>(const bfloat16_t*, const bfloat16_t*, int64_t, float*, int64_t, int,
                             bool);

}  // namespace cpukern::moe::bfmmla
