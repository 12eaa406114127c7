// Reference fp32 micro-kernel (the oracle): public t2p16 layout, one row at a time.
// Each row's sum is accumulated in double (adds and subtracts only) and rounded once.
#include <cstring>

#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

F32Geometry geometry(int64_t m, int64_t k) {
  F32Geometry g;
  g.p0 = words_for(k);
  g.p1 = k;
  g.tile_bytes = g.p0 * 4;
  g.x_bytes = (k * 4 + 63) / 64 * 64;
  return g;
}

int64_t packed_size(int64_t m, int64_t k) { return m * words_for(k) * 4; }

void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  std::memcpy(dst, packed, size_t(packed_size(m, k)));
}

void ternary_gemv_f32_t2p16_1x1__scalar_xprep(const float* x, const F32Geometry* geo, void* dst) {
  float* d = static_cast<float*>(dst);
  for (int64_t j = 0; j < geo->p1; ++j) d[j] = x[j];
}

void ternary_gemv_f32_t2p16_1x1__scalar_run(const F32Args* a) {
  const int64_t words = a->geo->p0, k = a->geo->p1;
  const uint32_t* w = static_cast<const uint32_t*>(a->w);
  float* yr = a->y;
  for (int64_t r = 0; r < a->rows; ++r, w += words, ++yr) {
    const char* xb = static_cast<const char*>(a->xp);
    float* yb = yr;
    for (int64_t b = 0; b < a->batch; ++b, xb += a->geo->x_bytes, yb += a->ldy) {
      const float* x = reinterpret_cast<const float*>(xb);
      double acc = 0.0;
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t code = (w[j >> 4] >> ((j & 15) << 1)) & 3u;
        if (code == 2u) acc += double(x[j]);
        if (code == 1u) acc -= double(x[j]);
      }
      *yb = float(acc);
    }
  }
}

}  // namespace

const F32Ukernel ternary_gemv_f32_t2p16_1x1__scalar = {
    "ternary_gemv_f32_t2p16_1x1__scalar", 1, geometry, packed_size, pack,
    ternary_gemv_f32_t2p16_1x1__scalar_xprep, ternary_gemv_f32_t2p16_1x1__scalar_run};

}  // namespace cpukern::ternary
