// The AArch64 BFMMLA micro-kernel (the vLLM PR's design): 8 rows x 8 columns, 4 row pairs x
// 4 column pairs = 16 float32x4 accumulators each holding a 2x2 block of C; bf16 inputs, fp32
// accumulation, K consumed 4 at a time (both packings zero-padded). Blocks of at most 4 rows go
// to the 4x16 kernel. Also the "bf16p8x4" packers, the gemm entry and the activation hook.
#include <algorithm>
#include <cstring>

#include "kernels/moe/activations.h"
#include "kernels/moe/ukernel.h"
#include "kernels/moe/ukernels/neon_bfmmla.h"

// GCC keeps accumulator arrays in registers only when their loops are unrolled before scalar
// replacement; without the pragma it stores them to the stack every k step.
#define CPUKERN_UNROLL _Pragma("GCC unroll 16")

namespace cpukern::moe {
namespace {

using bfmmla::init_acc_rowpair;
using bfmmla::kKR;
using bfmmla::row_or_null;
using bfmmla::store_acc_rowpair;
constexpr int kMR = 8, kNR = 8;

int64_t packed_size(int64_t o, int64_t i) {
  return (o + kNR - 1) / kNR * kNR * round_up(i, kKR) * 2;
}

// [ceil(o/8)][Kp/4][4 column pairs][2 columns][4 k].
void pack(const bf16_t* w, int64_t o, int64_t i, void* dst) {
  const int64_t kp = round_up(i, kKR), panels = (o + kNR - 1) / kNR;
  bf16_t* d = static_cast<bf16_t*>(dst);
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t kb = 0; kb < kp / 4; ++kb)
      CPUKERN_UNROLL for (int c = 0; c < 8; ++c) {  // c = 2 * pair + column within the pair
        const int64_t col = p * 8 + c;
        bf16_t* out = d + ((p * (kp / 4) + kb) * 8 + c) * 4;
        CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
          const int64_t k = kb * 4 + q;
          out[q] = (col < o && k < i) ? w[col * i + k] : bf16_t(0);
        }
      }
}

// Blocks of 8 rows: [Kp/4][4 row pairs][2 rows][4 k]; ragged rows zero-filled.
int64_t packed_a_size(int64_t m, int64_t k) { return round_up(m, 8) * round_up(k, kKR) * 2; }
void pack_a(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k, void* dst) {
  const int64_t kp = round_up(k, kKR), blocks = (m + 7) / 8;
  bf16_t* d = static_cast<bf16_t*>(dst);
  for (int64_t b = 0; b < blocks; ++b) {
    bf16_t* db = d + b * 8 * kp;
    CPUKERN_UNROLL for (int rr = 0; rr < 8; ++rr) {
      const int64_t r = b * 8 + rr;
      const bf16_t* src = r < m ? a + (rows ? int64_t(rows[r]) : r) * lda : nullptr;
      for (int64_t kb = 0; kb < kp / 4; ++kb) {
        bf16_t* out = db + (kb * 8 + rr) * 4;
        CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
          const int64_t kk = kb * 4 + q;
          out[q] = (src && kk < k) ? src[kk] : bf16_t(0);
        }
      }
    }
  }
}

void kernel_8x8(const bfloat16_t* a, const bfloat16_t* w, int64_t kb, float* c, int64_t ldc,
                int mrows, bool accumulate) {
  float32x4_t acc[4][4];
  CPUKERN_UNROLL for (int q = 0; q < 4; ++q)
    init_acc_rowpair(row_or_null(c, ldc, 2 * q, mrows), row_or_null(c, ldc, 2 * q + 1, mrows),
                     accumulate, acc[q][0], acc[q][1], acc[q][2], acc[q][3]);
  for (int64_t k = 0; k < kb; ++k) {
    const bfloat16_t* ak = a + k * 32;
    const bfloat16_t* wk = w + k * 32;
    const bfloat16x8_t b0 = vld1q_bf16(wk), b1 = vld1q_bf16(wk + 8);
    const bfloat16x8_t b2 = vld1q_bf16(wk + 16), b3 = vld1q_bf16(wk + 24);
    CPUKERN_UNROLL for (int q = 0; q < 4; ++q) {
      const bfloat16x8_t av = vld1q_bf16(ak + 8 * q);
      acc[q][0] = vbfmmlaq_f32(acc[q][0], av, b0);
      acc[q][1] = vbfmmlaq_f32(acc[q][1], av, b1);
      acc[q][2] = vbfmmlaq_f32(acc[q][2], av, b2);
      acc[q][3] = vbfmmlaq_f32(acc[q][3], av, b3);
    }
  }
  CPUKERN_UNROLL for (int q = 0; q < 4; ++q)
    store_acc_rowpair(row_or_null(c, ldc, 2 * q, mrows), row_or_null(c, ldc, 2 * q + 1, mrows),
                      acc[q][0], acc[q][1], acc[q][2], acc[q][3]);
}

void gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0, int64_t p1,
          float* c, int64_t ldc, bool accumulate) {
  const int64_t kp = round_up(k, kKR), kb = kp / 4, panel = kNR * kp;
  const bfloat16_t* a = static_cast<const bfloat16_t*>(a_packed);
  const bfloat16_t* wp = static_cast<const bfloat16_t*>(w);
  for (int64_t r = 0; r < m; r += kMR) {
    const int mrows = int(std::min<int64_t>(kMR, m - r));
    const bfloat16_t* ab = a + r * kp;  // block r / 8 starts at r * kp
    float* cr = c + r * ldc;
    int64_t p = p0;
    if (mrows > 4) {
      for (; p < p1; ++p) kernel_8x8(ab, wp + p * panel, kb, cr + (p - p0) * kNR, ldc, mrows,
                                     accumulate);
    } else {
      for (; p + 2 <= p1; p += 2)
        bfmmla::kernel_4x16<2>(ab, wp + p * panel, kb, cr + (p - p0) * kNR, ldc, mrows, accumulate);
      if (p < p1)
        bfmmla::kernel_4x16<1>(ab, wp + p * panel, kb, cr + (p - p0) * kNR, ldc, mrows, accumulate);
    }
  }
}

void activation(Activation act, int64_t m, int64_t n, const float* g, const float* u, int64_t ldc,
                bool interleaved, const bf16_t* bg, const bf16_t* bu, bf16_t* out, int64_t ldo) {
  act::activation_rows<4>(act, m, n, g, u, ldc, interleaved, bg, bu, out, ldo);
}

}  // namespace

const Ukernel kUkernelNeonBfmmla = {
    "moe_gemm_f32_bf16p8x4_bf16p8x4_8x8__neon_bfmmla", "bf16p8x4", kMR, kNR, kKR,
    packed_size, pack, packed_a_size, pack_a, gemm, activation,
};

}  // namespace cpukern::moe
