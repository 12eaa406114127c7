// Bindings of cpukern::widely_linear (see kernels/widely_linear/widely_linear.h).
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "kernels/widely_linear/widely_linear.h"
#include "python/ext/arrays.h"
#include "python/ext/gil.h"
#include "python/ext/prepared.h"

namespace cpukern::ext {

using widely_linear::PreparedLayer;

namespace {

// planes (S, 4, n, words); scales (S, 4) or (S, 4, n).
struct PlaneShape {
  int64_t stages, n, words;
  bool per_row;
};

PlaneShape plane_shape(const InArray& planes, const InArray& scales) {
  check<uint32_t>(planes, "planes", {4});
  check<float>(scales, "scales", {2, 3});
  if (planes.shape(1) != 4)
    throw_arg("planes", "expected shape (stages, 4, n, words) with the planes U_re, U_im, W_re, W_im, got " +
                            describe_array(planes));
  PlaneShape s{int64_t(planes.shape(0)), int64_t(planes.shape(2)), int64_t(planes.shape(3)),
               scales.ndim() == 3};
  if (s.per_row)
    check_shape(scales, "scales", {s.stages, 4, s.n});
  else
    check_shape(scales, "scales", {s.stages, 4});
  return s;
}

}  // namespace

void bind_widely_linear(nb::module_& m) {
  // The layer straight from a serialised buffer (the torch op): header validated per call.
  m.def(
      "widely_linear_run_buffer",
      [](const InArray& buf, int64_t rows, const InArray& x, int threads, const OutArray& out) {
        const auto [p, size] = buffer_bytes(buf, "prepared");
        widely_linear::ImportOptions o;
        o.arg = "prepared";
        o.allow_reprepare = false;
        auto layer = widely_linear::from_buffer(p, size, nullptr, o);
        if (2 * layer->n != rows)
          throw_arg("prepared", "holds " + std::to_string(2 * layer->n) +
                                    " output features, the op was given " + std::to_string(rows));
        const auto* xp = in_ptr<float>(x, "x", {1, 2});
        const int64_t batch = x.ndim() == 1 ? 1 : int64_t(x.shape(0));
        if (int64_t(x.shape(x.ndim() - 1)) != 2 * layer->m)
          throw_arg("x", "expected 2m = " + std::to_string(2 * layer->m) + " columns, got " +
                             describe_array(x));
        if (x.ndim() == 1)
          check_shape(out, "out", {2 * layer->n});
        else
          check_shape(out, "out", {batch, 2 * layer->n});
        auto* yp = out_ptr<float>(out, "out", {1, 2});
        GilRelease release(double(batch) * double(layer->stages) * 8.0 * double(layer->n) *
                           double(layer->m));
        widely_linear::run(*layer, xp, batch, true, threads, yp);
      },
      nb::arg("prepared"), nb::arg("rows"), nb::arg("x"), nb::arg("threads"), nb::arg("out"));

  m.def("widely_linear_variants", [] { return variants_to_list(widely_linear::list_variants()); });

  m.def("widely_linear_phase_quantize",
        [](const InArray& a, int64_t stages, const OutArray& planes, const OutArray& scales) {
          check_extent(stages, "stages", 1);
          const auto* ap = in_ptr<float>(a, "a", {2});
          const int64_t rows = int64_t(a.shape(0)), cols = int64_t(a.shape(1));
          if (rows % 2 || cols % 2 || rows == 0 || cols == 0)
            throw_arg("a", "expected a (2n, 2m) matrix with n, m >= 1, got " + describe_array(a));
          const int64_t n = rows / 2, m_ = cols / 2;
          check_shape(planes, "planes", {stages, 4, n, (m_ + 15) / 16});
          check_shape(scales, "scales", {stages, 4});
          auto* pp = out_ptr<uint32_t>(planes, "planes", {4});
          auto* sp = out_ptr<float>(scales, "scales", {2});
          GilRelease release;
          widely_linear::phase_quantize(ap, n, m_, stages, pp, sp);
        });

  m.def("widely_linear_dense",
        [](const InArray& planes, const InArray& scales, int64_t m_, const OutArray& out) {
          check_extent(m_, "m", 1);
          const PlaneShape s = plane_shape(planes, scales);
          check_shape(out, "out", {2 * s.n, 2 * m_});
          auto* op = out_ptr<float>(out, "out", {2});
          GilRelease release;
          widely_linear::dense(static_cast<const uint32_t*>(planes.data()),
                               static_cast<const float*>(scales.data()), s.per_row, s.stages, s.n,
                               s.words, m_, op);
        });

  m.def("widely_linear_prepare",
        [](const InArray& planes, const InArray& scales, int64_t m_, const std::string& isa) {
          check_extent(m_, "m", 1);
          const PlaneShape s = plane_shape(planes, scales);
          GilRelease release;
          return std::shared_ptr<const PackedWeights>(widely_linear::prepare(
              static_cast<const uint32_t*>(planes.data()), static_cast<const float*>(scales.data()),
              s.per_row, s.stages, s.n, s.words, m_, isa));
        });

  m.def("widely_linear_run", [](const PackedWeights& packed, const InArray& x, bool fused,
                                int threads, const OutArray& out) {
    const PreparedLayer& layer = weights_of<PreparedLayer>(
        packed, "planes", "WidelyLinearWeights from cpukern.widely_linear.prepare");
    const auto* xp = in_ptr<float>(x, "x", {1, 2});
    const int64_t batch = x.ndim() == 1 ? 1 : int64_t(x.shape(0));
    if (int64_t(x.shape(x.ndim() - 1)) != 2 * layer.m)
      throw_arg("x", "expected 2m = " + std::to_string(2 * layer.m) + " columns, got " +
                         describe_array(x));
    if (x.ndim() == 1)
      check_shape(out, "out", {2 * layer.n});
    else
      check_shape(out, "out", {batch, 2 * layer.n});
    auto* yp = out_ptr<float>(out, "out", {1, 2});
    GilRelease release(double(batch) * double(layer.stages) * 8.0 * double(layer.n) *
                       double(layer.m));
    widely_linear::run(layer, xp, batch, fused, threads, yp);
  });
}

}  // namespace cpukern::ext
