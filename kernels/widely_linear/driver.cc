// prepare() and run(): validation at the boundary, then row tiles on the thread pool.
// Every output row is computed by exactly one task, in a fixed order (stages in order,
// the 8 dot products from the variant's ukernel, then the scale epilogue), so results do
// not depend on the thread count, the batch size, or the fused/unfused schedule.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/prescale.h"
#include "kernels/common/ternary_codes.h"
#include "kernels/common/thread_pool.h"
#include "kernels/widely_linear/ukernel.h"

namespace cpukern::widely_linear {

const Packer& packer_for(const Layout& layout) {
  const Packer* best = best_packer(packers(), [&](const Packer& p) { return p.layout == &layout; });
  check_arg(best != nullptr, "variant", std::string("no packer for layout ") + layout.name);
  return *best;
}

std::shared_ptr<const PreparedLayer> prepare_with(const Variant& v, const uint32_t* planes,
                                                  const float* scales, bool scales_per_row,
                                                  int64_t stages, int64_t n, int64_t words,
                                                  int64_t m, const BlobTarget* into) {
  validate_planes(planes, stages, n, words, m);
  validate_scales(scales, scales_per_row, stages, n);
  auto layer = std::make_shared<PreparedLayer>();
  layer->variant = &v;
  layer->isa = v.name;
  layer->ukernel_name = v.ukernel.name;
  layer->layout_name = v.ukernel.layout->name;
  const Packer& packer = packer_for(*v.ukernel.layout);
  layer->packer = packer.name;
  layer->stages = stages;
  layer->n = n;
  layer->m = m;
  const Dims d{stages, n, m, words};
  if (into) {
    int64_t sizes[2];
    section_sizes(v, d, sizes);
    check_disjoint(into->p, into->size, "out",
                   {{planes, stages * 4 * n * words * 4, "planes"},
                    {scales, 4 * stages * 4 * (scales_per_row ? n : 1), "scales"}});
    layer->place_sections(*into, sizes);
  }
  auto* per_row = static_cast<float*>(
      layer->own_section(PreparedLayer::kScales, 4 * stages * 4 * n, true));
  for (int64_t s = 0; s < stages; ++s)
    for (int p = 0; p < 4; ++p)
      for (int64_t r = 0; r < n; ++r)
        per_row[(s * 4 + p) * n + r] =
            scales_per_row ? scales[(s * 4 + p) * n + r] : scales[s * 4 + p];
  packer.pack(planes, d,
              layer->own_section(PreparedLayer::kLayout, int64_t(v.ukernel.layout->packed_size(d))));
  if (into) layer->seal({});
  return layer;
}

std::shared_ptr<const PreparedLayer> prepare(const uint32_t* planes, const float* scales,
                                             bool scales_per_row, int64_t stages, int64_t n,
                                             int64_t words, int64_t m, const std::string& isa,
                                             const BlobTarget* into) {
  return prepare_with(registry().select(isa), planes, scales, scales_per_row, stages, n, words, m,
                      into);
}

int64_t prepared_size(int64_t stages, int64_t n, int64_t words, int64_t m, const std::string& isa) {
  const Variant& v = registry().select(isa);
  check_plane_dims(stages, n, words, m);
  int64_t sizes[2];
  section_sizes(v, Dims{stages, n, m, words}, sizes);
  return int64_t(blob::plan(sizes, 2).total);
}

namespace {

// Rows per task: a tile's planes (all stages) around 32 KiB, at least 4 tasks per thread
// when there are rows enough, a multiple of the ukernel's tile.
int64_t tile_rows(const Dims& d, int mr, int threads) {
  const int64_t row_bytes = std::max<int64_t>(1, 16 * d.words * d.stages);
  int64_t t = std::clamp<int64_t>((32 << 10) / row_bytes, 1, 64);
  t = std::min<int64_t>(t, (d.n + 4 * threads - 1) / (4 * threads));
  t = std::max<int64_t>(1, (t + mr - 1) / mr * mr);
  return t;
}

}  // namespace

void check_x_columns(const PreparedLayer& layer, int64_t columns, const std::string& got) {
  check_arg(columns == 2 * layer.m, "x",
            "expected 2m = " + std::to_string(2 * layer.m) + " columns, got " + got);
}

void run(const PreparedLayer& layer, const float* x, int64_t batch, bool fused, int threads,
         float* y) {
  check_arg(layer.variant != nullptr && layer.n >= 1 && layer.m >= 1 && layer.stages >= 1,
            "layer", "is not a prepared layer");
  check_arg(batch >= 0, "x", "batch must be >= 0, got " + std::to_string(batch));
  const int nthreads = limits::resolve_threads(threads);
  if (batch == 0) return;
  check_arg(x != nullptr, "x", "must not be null");
  check_arg(y != nullptr, "y", "must not be null");
  checked_mul(batch, 2 * (layer.m + layer.n), "x");
  check_disjoint(y, batch * 2 * layer.n * 4, "out",
                 {{x, batch * 2 * layer.m * 4, "x"}});
  layer.check_disjoint_from(y, batch * 2 * layer.n * 4, "out", "layer");
  const Ukernel& uk = layer.variant->ukernel;
  const Layout& lay = *uk.layout;
  const Dims d{layer.stages, layer.n, layer.m, ternary_codes::words_for(layer.m)};

  // O3: x_re, -x_re, x_im, -x_im once per call, zero-padded to whole words; plus the
  // ukernel's own table if it has one.
  const int64_t w16 = d.words * 16;
  const int64_t tab = lay.table_floats ? (lay.table_floats(d) + 15) / 16 * 16 : 0;
  const int64_t per_b = 4 * w16 + tab;
  AlignedBuffer act(size_t(checked_mul(batch, per_b, "x")) * sizeof(float));
  std::vector<Acts> acts(static_cast<size_t>(batch));
  // A batch row whose sums could overflow runs as x * 2**-e; its epilogue scales back by
  // `up` = 2**e in double (prescale.h). Other rows: up = 1, the plain fp32 epilogue.
  std::vector<double> up(static_cast<size_t>(batch), 1.0);
  std::vector<float> row;
  for (int64_t b = 0; b < batch; ++b) {
    float* base = act.data<float>() + b * per_b;
    const float* xb = x + b * 2 * d.m;
    if (const int e = prescale::exponent(xb, 2 * d.m, 2 * d.m)) {
      row.resize(size_t(2 * d.m));
      prescale::scale_row(xb, 2 * d.m, e, row.data());
      xb = row.data();
      up[size_t(b)] = std::ldexp(1.0, e);
    }
    for (int64_t c = 0; c < d.m; ++c) {
      base[c] = xb[c];
      base[w16 + c] = -xb[c];
      base[2 * w16 + c] = xb[d.m + c];
      base[3 * w16 + c] = -xb[d.m + c];
    }
    Acts& a = acts[size_t(b)];
    for (int s = 0; s < 4; ++s) a.src[s] = base + s * w16;
    if (tab) {
      lay.build_table(a, d, base + 4 * w16);
      a.table = base + 4 * w16;
    }
  }

  const void* data = layer.layout();
  const float* scales = layer.scale_data();
  const int64_t t = tile_rows(d, uk.rows_per_tile, nthreads);
  const int64_t tasks = (d.n + t - 1) / t;

  // One call: rows [r0, r1) of stage s for batch rows [b0, b0 + nb), plane `plane`.
  auto make_call = [&](int64_t s, int plane, int64_t r0, int64_t r1, int64_t b0, int nb) {
    Call c;
    c.loc = lay.locate(data, d, s, plane, r0);
    c.rows = r1 - r0;
    c.nb = nb;
    for (int b = 0; b < nb; ++b) c.x[b] = acts[size_t(b0 + b)];
    return c;
  };

  // Rows [r0, r1) of every stage for batch rows [b0, b0 + nb) through a fused kernel, then
  // the epilogue; dots: kMaxBatch * (r1 - r0) * kNumSub floats of scratch.
  auto fused_rows = [&](void (*kernel)(const Call&), const float* gtable, int64_t r0,
                        int64_t r1, int64_t b0, int nb, float* dots) {
    const int64_t per = (r1 - r0) * kNumSub;
    for (int64_t s = 0; s < d.stages; ++s) {
      Call c = make_call(s, 0, r0, r1, b0, nb);
      c.gtable = gtable;
      for (int b = 0; b < nb; ++b) c.dots[b] = dots + b * per;
      kernel(c);
      for (int b = 0; b < nb; ++b) {
        float* yb = y + (b0 + b) * 2 * d.n;
        scale_epilogue(c.dots[b], scales + s * 4 * d.n, d.n, r0, r1, s == 0, yb, yb + d.n,
                       up[size_t(b0 + b)]);
      }
    }
  };

  if (fused && uk.fused_batch && batch >= 2) {
    // Groups of 2..kMaxBatch batch rows go to the batched kernel (bitwise equal to `fused`;
    // a lone last row of the batch runs in its own group through it too, zero-padded, so a
    // row's result never depends on how the batch is grouped).
    const int64_t tb = std::max<int64_t>(
        uk.rows_per_tile,
        std::min<int64_t>(uk.batch_rows, (d.n + 2 * nthreads - 1) / (2 * nthreads)) /
            uk.rows_per_tile * uk.rows_per_tile);
    const int64_t btasks = (d.n + tb - 1) / tb;
    const int64_t gfloats = (lay.table_floats_batch(d) + 15) / 16 * 16;
    AlignedBuffer gt(size_t(gfloats) * sizeof(float));
    for (int64_t b0 = 0; b0 < batch; b0 += kMaxBatch) {
      const int nb = int(std::min<int64_t>(kMaxBatch, batch - b0));
      lay.build_table_batch(acts.data() + b0, nb, d, gt.data<float>());
      parallel_for(btasks, nthreads, [&](int64_t task) {
        const int64_t r0 = task * tb, r1 = std::min(d.n, r0 + tb);
        std::vector<float> dots(static_cast<size_t>(kMaxBatch * (r1 - r0) * kNumSub));
        fused_rows(uk.fused_batch, gt.data<float>(), r0, r1, b0, nb, dots.data());
      });
    }
    return;
  }

  if (fused) {
    // Per row tile: batch rows in groups of kMaxBatch; per group every stage's bytes are
    // read and decoded once for the whole group.
    parallel_for(tasks, nthreads, [&](int64_t task) {
      const int64_t r0 = task * t, r1 = std::min(d.n, r0 + t);
      std::vector<float> dots(static_cast<size_t>(kMaxBatch * (r1 - r0) * kNumSub));
      for (int64_t b0 = 0; b0 < batch; b0 += kMaxBatch) {
        const int nb = int(std::min<int64_t>(kMaxBatch, batch - b0));
        fused_rows(uk.fused, nullptr, r0, r1, b0, nb, dots.data());
      }
    });
    return;
  }

  // The naive schedule: per group of batch rows and stage, 8 separate passes over the whole
  // layer (one per sub-GEMV, each reading its plane from memory again), then the epilogue.
  const int64_t per = d.n * kNumSub;
  std::vector<float> dots(static_cast<size_t>(kMaxBatch * per));
  for (int64_t b0 = 0; b0 < batch; b0 += kMaxBatch) {
    const int nb = int(std::min<int64_t>(kMaxBatch, batch - b0));
    for (int64_t s = 0; s < d.stages; ++s) {
      for (int k = 0; k < kNumSub; ++k)
        parallel_for(tasks, nthreads, [&](int64_t task) {
          const int64_t r0 = task * t, r1 = std::min(d.n, r0 + t);
          Call c = make_call(s, kSubPlane[k], r0, r1, b0, nb);
          c.k = k;
          for (int b = 0; b < nb; ++b) c.dots[b] = dots.data() + b * per + r0 * kNumSub;
          uk.gemv(c);
        });
      parallel_for(tasks, nthreads, [&](int64_t task) {
        const int64_t r0 = task * t, r1 = std::min(d.n, r0 + t);
        for (int b = 0; b < nb; ++b) {
          float* yb = y + (b0 + b) * 2 * d.n;
          scale_epilogue(dots.data() + b * per + r0 * kNumSub, scales + s * 4 * d.n, d.n, r0,
                         r1, s == 0, yb, yb + d.n, up[size_t(b0 + b)]);
        }
      });
    }
  }
}

}  // namespace cpukern::widely_linear
