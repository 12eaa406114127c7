// Bindings of cpukern::widely_linear (see kernels/widely_linear/widely_linear.h).
#include <nanobind/stl/pair.h>
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

// planes (S, 4, n, words), or (4, n, words) for one stage; scales (S, 4) or (S, 4, n), without
// the stage axis when planes have none ((4,) or (4, n)).
struct PlaneShape {
  int64_t stages, n, words;
  bool per_row;
};

PlaneShape plane_shape(const InArray& planes, const InArray& scales) {
  check<uint32_t>(planes, "planes", {3, 4});
  const bool staged = planes.ndim() == 4;
  if (staged)
    check<float>(scales, "scales", {2, 3});
  else
    check<float>(scales, "scales", {1, 2, 3});
  const size_t d = staged ? 1 : 0;  // the axis of the 4 planes
  if (planes.shape(d) != 4)
    throw_arg("planes", "expected shape (stages, 4, n, words) with the planes U_re, U_im, W_re, W_im, got " +
                            describe_array(planes));
  const bool scales_staged = staged || scales.ndim() == 3;
  PlaneShape s{staged ? int64_t(planes.shape(0)) : 1, int64_t(planes.shape(d + 1)),
               int64_t(planes.shape(d + 2)), scales.ndim() == (scales_staged ? 3u : 2u)};
  std::vector<int64_t> want;
  if (scales_staged) want.push_back(s.stages);
  want.push_back(4);
  if (s.per_row) want.push_back(s.n);
  check_shape(scales, "scales", want);
  return s;
}

}  // namespace

void bind_widely_linear(nb::module_& m) {
  // The layer straight from a serialised buffer (the torch op): header validated per call.
  m.def(
      "widely_linear_run_buffer",
      [](const InArray& buf, int64_t rows, const InArray& x, int threads,
         const std::optional<OutArray>& out) {
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
        widely_linear::check_x_columns(*layer, int64_t(x.shape(x.ndim() - 1)), describe_array(x));
        Output<float> y = output<float>(out, "out", rows_by(x, 2 * layer->n), "x");
        {
          GilRelease release(double(batch) * double(layer->stages) * 8.0 * double(layer->n) *
                             double(layer->m));
          widely_linear::run(*layer, xp, batch, true, threads, y.data);
        }
        return std::move(y.array);
      },
      nb::arg("prepared"), nb::arg("rows"), nb::arg("x"), nb::arg("threads"),
      nb::arg("out").none());

  m.def("widely_linear_variants", [] { return variants_to_list(widely_linear::list_variants()); });

  // Returns new numpy arrays: planes uint32 (stages, 4, n, ceil(m/16)), scales float32 (stages, 4).
  m.def("widely_linear_phase_quantize", [](const InArray& a, int64_t stages) {
    check_extent(stages, "stages", 1);
    const auto* ap = in_ptr<float>(a, "a", {2});
    const int64_t rows = int64_t(a.shape(0)), cols = int64_t(a.shape(1));
    if (rows % 2 || cols % 2 || rows == 0 || cols == 0)
      throw_arg("a", "expected a (2n, 2m) matrix with n, m >= 1, got " + describe_array(a));
    const int64_t n = rows / 2, m_ = cols / 2, words = (m_ + 15) / 16;
    const int64_t nplanes = checked_mul(checked_mul(stages, 4, "stages"), n * words, "stages");
    check_extent(nplanes, "stages", 0);
    auto* pp = new uint32_t[size_t(nplanes)];
    nb::capsule pown(pp, [](void* p) noexcept { delete[] static_cast<uint32_t*>(p); });
    auto* sp = new float[size_t(stages * 4)];
    nb::capsule sown(sp, [](void* p) noexcept { delete[] static_cast<float*>(p); });
    {
      GilRelease release;
      widely_linear::phase_quantize(ap, n, m_, stages, pp, sp);
    }
    const size_t pshape[4] = {size_t(stages), 4, size_t(n), size_t(words)};
    const size_t sshape[2] = {size_t(stages), 4};
    return std::make_pair(nb::ndarray<nb::numpy, uint32_t, nb::ndim<4>>(pp, 4, pshape, pown),
                          nb::ndarray<nb::numpy, float, nb::ndim<2>>(sp, 2, sshape, sown));
  }, nb::arg("a"), nb::arg("stages"));

  // Returns a new float32 (2n, 2m) numpy array (dense checks the planes before writing it).
  m.def("widely_linear_dense",
        [](const InArray& planes, const InArray& scales, int64_t m_) {
          check_extent(m_, "m", 1);
          const PlaneShape s = plane_shape(planes, scales);
          const int64_t elems = checked_mul(4 * s.n, m_, "m");
          check_extent(elems, "m", 0);
          auto* op = new float[size_t(elems ? elems : 1)];
          nb::capsule own(op, [](void* p) noexcept { delete[] static_cast<float*>(p); });
          {
            GilRelease release;
            widely_linear::dense(static_cast<const uint32_t*>(planes.data()),
                                 static_cast<const float*>(scales.data()), s.per_row, s.stages,
                                 s.n, s.words, m_, op);
          }
          const size_t shape[2] = {size_t(2 * s.n), size_t(2 * m_)};
          return nb::ndarray<nb::numpy, float, nb::ndim<2>>(op, 2, shape, own);
        },
        nb::arg("planes"), nb::arg("scales"), nb::arg("m"));

  // out: pack straight into it (widely_linear::prepare's into), a buffer of
  // widely_linear_prepared_size's bytes for the same arguments.
  m.def("widely_linear_prepare",
        [](const InArray& planes, const InArray& scales, int64_t m_, const std::string& variant,
           const std::optional<OutArray>& out) {
          check_extent(m_, "m", 1);
          const PlaneShape s = plane_shape(planes, scales);
          auto prepare = [&](const BlobTarget* into) {
            return std::shared_ptr<const PackedWeights>(widely_linear::prepare(
                static_cast<const uint32_t*>(planes.data()),
                static_cast<const float*>(scales.data()), s.per_row, s.stages, s.n, s.words, m_,
                variant, into));
          };
          if (out)
            return prepare_into(
                *out, widely_linear::prepared_size(s.stages, s.n, s.words, m_, variant), 0.0,
                [&](const BlobTarget& into) { return prepare(&into); });
          GilRelease release;
          return prepare(nullptr);
        },
        nb::arg("planes"), nb::arg("scales"), nb::arg("m"), nb::arg("variant"),
        nb::arg("out").none() = nb::none());
  // The bytes of widely_linear_prepare's serialised form for these arguments (its out's size).
  m.def("widely_linear_prepared_size",
        [](const InArray& planes, const InArray& scales, int64_t m_, const std::string& variant) {
          check_extent(m_, "m", 1);
          const PlaneShape s = plane_shape(planes, scales);
          return widely_linear::prepared_size(s.stages, s.n, s.words, m_, variant);
        },
        nb::arg("planes"), nb::arg("scales"), nb::arg("m"), nb::arg("variant"));

  // variant: "" or the variant the layer was prepared for (checked here: one call per forward).
  m.def("widely_linear_run", [](const PackedWeights& packed, const InArray& x, bool fused,
                                const std::string& variant, int threads,
                                const std::optional<OutArray>& out) {
    const PreparedLayer& layer = weights_of<PreparedLayer>(
        packed, "planes", "PackedWeights from cpukern.widely_linear.prepare");
    packed.check_variant(variant);
    const auto* xp = in_ptr<float>(x, "x", {1, 2});
    const int64_t batch = x.ndim() == 1 ? 1 : int64_t(x.shape(0));
    widely_linear::check_x_columns(layer, int64_t(x.shape(x.ndim() - 1)), describe_array(x));
    Output<float> y = output<float>(out, "out", rows_by(x, 2 * layer.n), "x");
    {
      GilRelease release(double(batch) * double(layer.stages) * 8.0 * double(layer.n) *
                         double(layer.m));
      widely_linear::run(layer, xp, batch, fused, threads, y.data);
    }
    return std::move(y.array);
  }, nb::arg("weights"), nb::arg("x"), nb::arg("fused"), nb::arg("variant"), nb::arg("threads"),
     nb::arg("out").none());
}

}  // namespace cpukern::ext
