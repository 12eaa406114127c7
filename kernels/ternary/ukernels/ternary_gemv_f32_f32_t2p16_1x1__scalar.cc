// Reference fp32 micro-kernel (the oracle): public t2p16 layout, one row at a time.
// Each row's sum is accumulated in double (adds and subtracts only) and rounded once.
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

F32Geometry geometry(int64_t m, int64_t k) { return word_geometry(k, 4); }

int64_t packed_size(int64_t m, int64_t k) { return m * words_for(k) * 4; }

void ternary_gemv_f32_f32_t2p16_1x1__scalar_xprep(const float* x, const F32Geometry* geo, void* dst) {
  xprep_padded(x, geo, dst);
}

void ternary_gemv_f32_f32_t2p16_1x1__scalar_run(const F32Args* a) {
  const int64_t words = a->geo->p0;
  const uint32_t* w = static_cast<const uint32_t*>(a->w);
  float* yr = a->y;
  for (int64_t r = 0; r < a->rows; ++r, w += words, ++yr) {
    const char* xb = static_cast<const char*>(a->xp);
    float* yb = yr;
    for (int64_t b = 0; b < a->batch; ++b, xb += a->geo->x_bytes, yb += a->ldy) {
      const float* x = reinterpret_cast<const float*>(xb);
      // Two double sums (adds only), rounded once: the most accurate result in fp32.
      double add = 0.0, sub = 0.0;
      const float* xw = x;
      for (int64_t i = 0; i < words; ++i, xw += 16) {
        for (uint32_t m = ternary_codes::add_mask(w[i]); m; m &= m - 1)
          add += double(xw[__builtin_ctz(m)]);
        for (uint32_t m = ternary_codes::sub_mask(w[i]); m; m &= m - 1)
          sub += double(xw[__builtin_ctz(m)]);
      }
      const double acc = add - sub;
      *yb = float(acc);
    }
  }
}

}  // namespace

const F32Ukernel ternary_gemv_f32_f32_t2p16_1x1__scalar = {
    "ternary_gemv_f32_f32_t2p16_1x1__scalar", "t2p16", 1, geometry, packed_size,
    ternary_gemv_f32_f32_t2p16_1x1__scalar_xprep, ternary_gemv_f32_f32_t2p16_1x1__scalar_run};

}  // namespace cpukern::ternary
