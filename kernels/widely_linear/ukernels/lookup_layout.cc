// The "g3r8x4" kernel layout (portable pack and per-call table), used by the AVX2 lookup
// micro-kernels: lanes = 8 rows; columns in groups of 3; per group an 8-entry table of the
// subset sums of its 3 activations, looked up by each row's 3-bit "+1" pattern and 3-bit
// "-1" pattern (vpermps), so one lookup replaces three masked adds.
//
// Layout: uint32 lanes [stage][tile of 8 rows][chunk of 5 groups][plane][8 rows]; lane bits
// 3g..3g+2 = "+1" pattern of group g of the chunk, bits 15+3g..17+3g = its "-1" pattern.
// Rows past n and columns past m are zero.
// Table, per batch row: [group][T_re, T_im, T_nim][8] floats, T[s] = sum of x over the
// columns in subset s, added in column order; T_nim = -T_im (O3: the sign of d1 and d7 is
// which table they read).
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear::g3r8 {

int64_t tiles(const Dims& d) { return (d.n + 7) / 8; }
int64_t chunks(const Dims& d) { return ((d.m + 2) / 3 + 4) / 5; }

size_t packed_size(const Dims& d) {
  return size_t(d.stages * tiles(d) * chunks(d)) * 4 * 8 * sizeof(uint32_t);
}

void pack(const uint32_t* planes, const Dims& d, void* out) {
  uint32_t* o = static_cast<uint32_t*>(out);
  const int64_t T = tiles(d), C = chunks(d);
  for (int64_t s = 0; s < d.stages; ++s)
    for (int p = 0; p < 4; ++p) {
      const uint32_t* src = planes + (s * 4 + p) * d.n * d.words;
      for (int64_t r = 0; r < d.n; ++r)
        for (int64_t c = 0; c < d.m; ++c) {
          const uint32_t code = (src[r * d.words + c / 16] >> (2 * (c % 16))) & 3u;
          if (!code) continue;
          const int64_t g = c / 3, b = c % 3;
          const int shift = int(3 * (g % 5) + b) + (code == 1u ? 15 : 0);
          o[(((s * T + r / 8) * C + g / 5) * 4 + p) * 8 + r % 8] |= 1u << shift;
        }
    }
}

int64_t table_floats(const Dims& d) { return chunks(d) * 5 * 24; }

void build_table(const Acts& x, const Dims& d, float* table) {
  const int64_t groups = chunks(d) * 5;
  for (int64_t g = 0; g < groups; ++g)
    for (int t = 0; t < 2; ++t) {
      const float* src = x.src[t == 0 ? kXr : kXi];
      float v[3];
      for (int b = 0; b < 3; ++b) v[b] = 3 * g + b < d.m ? src[3 * g + b] : 0.0f;
      float* T = table + g * 24 + t * 8;
      T[0] = 0.0f;
      T[1] = v[0];
      T[2] = v[1];
      T[3] = v[0] + v[1];
      T[4] = v[2];
      T[5] = v[0] + v[2];
      T[6] = v[1] + v[2];
      T[7] = (v[0] + v[1]) + v[2];
      if (t == 1)
        for (int e = 0; e < 8; ++e) table[g * 24 + 16 + e] = -T[e];
    }
}

}  // namespace cpukern::widely_linear::g3r8
