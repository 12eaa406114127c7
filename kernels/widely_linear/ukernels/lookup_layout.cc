// The lookup kernel layouts (portable pack and per-call table): lanes = R rows; columns in
// groups of G; per group a 2^G-entry table of the subset sums of its G activations, looked
// up by each row's G-bit "+1" pattern and G-bit "-1" pattern (vpermps), so one lookup
// replaces G masked adds.
//   g3r8x4  (AVX2):    R = 8,  G = 3, K = 5 groups per chunk, "-1" patterns at bit 15.
//   g4r16x4 (AVX-512): R = 16, G = 4, K = 4 groups per chunk, "-1" patterns at bit 16.
// Layout: uint32 lanes [stage][tile of R rows][chunk of K groups][plane][R rows]; lane bits
// G*g .. G*g+G-1 = "+1" pattern of group g of the chunk, the same bits above the "-1" shift
// = its "-1" pattern. Rows past n and columns past m are zero.
// Table, per batch row: [group][T_re, T_im, T_nim][2^G] floats, T[s] = sum of x over the
// columns in subset s, added in column order; T_nim = -T_im (O3: the sign of d1 and d7 is
// which table they read).
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {
namespace {

struct Geometry {
  int R, G, K, neg_shift;
  int64_t tiles(const Dims& d) const { return (d.n + R - 1) / R; }
  int64_t chunks(const Dims& d) const { return ((d.m + G - 1) / G + K - 1) / K; }
};
constexpr Geometry kG3R8{8, 3, 5, 15}, kG4R16{16, 4, 4, 16};

size_t packed_size(const Geometry& q, const Dims& d) {
  return size_t(d.stages * q.tiles(d) * q.chunks(d)) * 4 * size_t(q.R) * sizeof(uint32_t);
}

void pack(const Geometry& q, const uint32_t* planes, const Dims& d, void* out) {
  uint32_t* o = static_cast<uint32_t*>(out);
  const int64_t T = q.tiles(d), C = q.chunks(d);
  for (int64_t s = 0; s < d.stages; ++s)
    for (int p = 0; p < 4; ++p) {
      const uint32_t* src = planes + (s * 4 + p) * d.n * d.words;
      for (int64_t r = 0; r < d.n; ++r)
        for (int64_t c = 0; c < d.m; ++c) {
          const uint32_t code = (src[r * d.words + c / 16] >> (2 * (c % 16))) & 3u;
          if (!code) continue;
          const int64_t g = c / q.G, b = c % q.G;
          const int shift = int(q.G * (g % q.K) + b) + (code == 1u ? q.neg_shift : 0);
          o[(((s * T + r / q.R) * C + g / q.K) * 4 + p) * q.R + r % q.R] |= 1u << shift;
        }
    }
}

int64_t table_floats(const Geometry& q, const Dims& d) {
  return q.chunks(d) * q.K * 3 * (int64_t(1) << q.G);
}

void build_table(const Geometry& q, const Acts& x, const Dims& d, float* table) {
  const int64_t groups = q.chunks(d) * q.K;
  const int E = 1 << q.G;
  for (int64_t g = 0; g < groups; ++g)
    for (int t = 0; t < 2; ++t) {
      const float* src = x.src[t == 0 ? kXr : kXi];
      float* T = table + (g * 3 + t) * E;
      for (int e = 0; e < E; ++e) {
        float sum = 0.0f;
        bool any = false;
        for (int b = 0; b < q.G; ++b) {
          if (!((e >> b) & 1)) continue;
          const float v = q.G * g + b < d.m ? src[q.G * g + b] : 0.0f;
          sum = any ? sum + v : v;
          any = true;
        }
        T[e] = sum;
        if (t == 1) table[(g * 3 + 2) * E + e] = -sum;
      }
    }
}

}  // namespace

namespace g3r8 {
size_t packed_size(const Dims& d) { return widely_linear::packed_size(kG3R8, d); }
void pack(const uint32_t* planes, const Dims& d, void* out) {
  widely_linear::pack(kG3R8, planes, d, out);
}
int64_t table_floats(const Dims& d) { return widely_linear::table_floats(kG3R8, d); }
void build_table(const Acts& x, const Dims& d, float* table) {
  widely_linear::build_table(kG3R8, x, d, table);
}
}  // namespace g3r8

namespace g4r16 {
size_t packed_size(const Dims& d) { return widely_linear::packed_size(kG4R16, d); }
void pack(const uint32_t* planes, const Dims& d, void* out) {
  widely_linear::pack(kG4R16, planes, d, out);
}
int64_t table_floats(const Dims& d) { return widely_linear::table_floats(kG4R16, d); }
void build_table(const Acts& x, const Dims& d, float* table) {
  widely_linear::build_table(kG4R16, x, d, table);
}
}  // namespace g4r16

}  // namespace cpukern::widely_linear
