// The kernel layouts (ukernel.h Layout): the public layout t2p16x4 and the lookup layouts
// g3r8x4 / g4r16x4 (lookup_layout.h): sizes, locate() and the per-call activation tables.
// Portable; run at prepare time or once per call, never in a micro-kernel's loop.
#include "kernels/widely_linear/ukernels/lookup_layout.h"

namespace cpukern::widely_linear {
namespace {

size_t public_size(const Dims& d) {
  return size_t(d.stages) * 4 * size_t(d.n) * size_t(d.words) * sizeof(uint32_t);
}

// Rows of `words` uint32, planes n rows apart.
Loc public_locate(const void* data, const Dims& d, int64_t stage, int plane, int64_t r0) {
  const int64_t row_bytes = d.words * int64_t(sizeof(uint32_t));
  Loc l;
  l.w = static_cast<const char*>(data) + ((stage * 4 + plane) * d.n + r0) * row_bytes;
  l.tile_stride = row_bytes;
  l.plane_stride = d.n * row_bytes;
  l.inner = d.words;
  return l;
}

}  // namespace

namespace lookup {
namespace {

size_t packed_size(const Geometry& q, const Dims& d) {
  return size_t(d.stages * q.tiles(d) * q.chunks(d)) * 4 * size_t(q.R) * sizeof(uint32_t);
}

Loc locate(const Geometry& q, const void* data, const Dims& d, int64_t stage, int plane,
           int64_t r0) {
  const int64_t C = q.chunks(d), lane_bytes = q.R * int64_t(sizeof(uint32_t));
  Loc l;
  l.w = static_cast<const char*>(data) +
        ((stage * q.tiles(d) + r0 / q.R) * C * 4 + plane) * lane_bytes;
  l.tile_stride = C * 4 * lane_bytes;
  l.plane_stride = lane_bytes;
  l.inner = C;
  return l;
}

int64_t table_floats(const Geometry& q, const Dims& d) {
  return q.chunks(d) * q.K * 3 * (int64_t(1) << q.G);
}

void build_table(const Geometry& q, const Acts& x, const Dims& d, float* table) {
  const int64_t groups = q.chunks(d) * q.K;
  const int E = 1 << q.G;
  for (int64_t g = 0; g < groups; ++g) {
    float* T = table + g * 3 * E;  // T_re, T_im, T_nim
    for (int t = 0; t < 2; ++t) {
      const float* src = x.src[t == 0 ? kXr : kXi];
      float cols[4];  // G <= 4
      for (int b = 0; b < q.G; ++b) cols[b] = q.G * g + b < d.m ? src[q.G * g + b] : 0.0f;
      ternary_lookup::subset_sums(cols, q.G, T + t * E);
    }
    for (int e = 0; e < E; ++e) T[2 * E + e] = -T[E + e];
  }
}

// [group][entry][16]: x_re of batch rows 0..3, x_im 0..3, x_re 0..3, -x_im 0..3 (copies of
// the rows' own tables, zero for rows past nb): signed_impl.h.
int64_t table_floats_batch(const Geometry& q, const Dims& d) {
  return q.chunks(d) * q.K * (int64_t(1) << q.G) * 16;
}

void build_table_batch(const Geometry& q, const Acts* x, int nb, const Dims& d, float* gt) {
  const int64_t groups = q.chunks(d) * q.K;
  const int E = 1 << q.G;
  for (int64_t g = 0; g < groups; ++g)
    for (int e = 0; e < E; ++e) {
      float* o = gt + (g * E + e) * 16;
      for (int b = 0; b < 4; ++b) {
        const float* T = b < nb ? x[b].table + g * 3 * E + e : nullptr;
        o[b] = T ? T[0] : 0.0f;
        o[4 + b] = T ? T[E] : 0.0f;
        o[8 + b] = T ? T[0] : 0.0f;
        o[12 + b] = T ? T[2 * E] : 0.0f;
      }
    }
}

// The Layout of geometry Q: its functions bound to Q.
template <const Geometry& Q>
constexpr Layout make(const char* name) {
  return Layout{
      name,
      [](const Dims& d) { return packed_size(Q, d); },
      [](const void* data, const Dims& d, int64_t stage, int plane, int64_t r0) {
        return locate(Q, data, d, stage, plane, r0);
      },
      [](const Dims& d) { return table_floats(Q, d); },
      [](const Acts& x, const Dims& d, float* t) { build_table(Q, x, d, t); },
      [](const Dims& d) { return table_floats_batch(Q, d); },
      [](const Acts* x, int nb, const Dims& d, float* t) { build_table_batch(Q, x, nb, d, t); },
  };
}

}  // namespace
}  // namespace lookup

namespace layouts {
const Layout t2p16x4{"t2p16x4", public_size, public_locate, nullptr, nullptr, nullptr, nullptr};
const Layout g3r8x4 = lookup::make<lookup::kG3R8>("g3r8x4");
const Layout g4r16x4 = lookup::make<lookup::kG4R16>("g4r16x4");
}  // namespace layouts

}  // namespace cpukern::widely_linear
