// Portable scalar micro-kernel, the oracle: weights kept as nn.Linear [o][i] bf16, A widened to
// fp32 rows, every C element one sequential fp32 sum over k (multiply, then add).
#include <cstring>

#include "kernels/moe/activations.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {
namespace {

int64_t packed_size(int64_t o, int64_t i) { return o * i * 2; }

void pack(const bf16_t* w, int64_t o, int64_t i, void* dst) {
  std::memcpy(dst, w, size_t(o * i) * 2);
}

int64_t packed_a_size(int64_t m, int64_t k) { return m * k * 4; }

void pack_a(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k, void* dst) {
  float* d = static_cast<float*>(dst);
  for (int64_t r = 0; r < m; ++r) {
    const bf16_t* src = a + (rows ? int64_t(rows[r]) : r) * lda;
    for (int64_t j = 0; j < k; ++j) d[r * k + j] = bf16_to_f32(src[j]);
  }
}

// The weights do not know o; a panel here is one row, and the caller only asks for rows < o.
void gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0, int64_t p1,
          float* c, int64_t ldc, bool accumulate) {
  const float* a = static_cast<const float*>(a_packed);
  const bf16_t* wb = static_cast<const bf16_t*>(w);
  for (int64_t r = 0; r < m; ++r) {
    const float* ar = a + r * k;
    int64_t p = p0;
    // Four columns at once for instruction-level parallelism; each sum stays sequential in k.
    for (; p + 4 <= p1; p += 4) {
      const bf16_t* w0 = wb + p * k;
      float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const float av = ar[j];
        s0 += av * bf16_to_f32(w0[j]);
        s1 += av * bf16_to_f32(w0[k + j]);
        s2 += av * bf16_to_f32(w0[2 * k + j]);
        s3 += av * bf16_to_f32(w0[3 * k + j]);
      }
      float* cr = c + r * ldc + (p - p0);
      if (accumulate) {
        cr[0] += s0, cr[1] += s1, cr[2] += s2, cr[3] += s3;
      } else {
        cr[0] = s0, cr[1] = s1, cr[2] = s2, cr[3] = s3;
      }
    }
    for (; p < p1; ++p) {
      const bf16_t* w0 = wb + p * k;
      float s0 = 0.0f;
      for (int64_t j = 0; j < k; ++j) s0 += ar[j] * bf16_to_f32(w0[j]);
      float* cr = c + r * ldc + (p - p0);
      *cr = accumulate ? *cr + s0 : s0;
    }
  }
}

void activation(Activation act, int64_t m, int64_t n, const float* g, const float* u, int64_t ldc,
                bool interleaved, const bf16_t* bg, const bf16_t* bu, bf16_t* out, int64_t ldo) {
  act::activation_rows<4>(act, m, n, g, u, ldc, interleaved, bg, bu, out, ldo);
}

}  // namespace

const Ukernel kUkernelScalar = {
    "moe_gemm_f32_f32_bf16_1x1__scalar", "bf16", 1, 1, 1,
    packed_size, pack, packed_a_size, pack_a, gemm, activation,
};

}  // namespace cpukern::moe
