// Bindings of cpukern::ternary (see kernels/ternary/ternary.h).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <vector>

#include "kernels/ternary/ternary.h"
#include "python/ext/arrays.h"
#include "python/ext/gil.h"
#include "python/ext/prepared.h"

namespace cpukern::ext {

using ternary::PreparedWeights;

namespace {

const PreparedWeights& ternary_weights(const PackedWeights& w) {
  return weights_of<PreparedWeights>(w, "weights", "PackedWeights from cpukern.ternary.prepare");
}

// prepare's arrays, checked here (their values by ternary::prepare): packed uint32 (rows,
// words) and the scale, group scales (rows, groups) or (rows,), or one value for every row.
struct PrepareArrays {
  const uint32_t* packed;
  int64_t rows, words;
  const float* given = nullptr;
  std::vector<float> broadcast;  // a scale of one value for every row
  const float* scale() const { return broadcast.empty() ? given : broadcast.data(); }
};

PrepareArrays prepare_arrays(const InArray& packed, int64_t k, const std::optional<InArray>& scale,
                             int64_t group_size) {
  check_extent(k, "k", 0);
  PrepareArrays a{in_ptr<uint32_t>(packed, "packed", {2}), int64_t(packed.shape(0)),
                  int64_t(packed.shape(1))};
  if (scale && group_size > 0) {
    a.given = in_ptr<float>(*scale, "scale", {2});
    check_shape(*scale, "scale", {a.rows, ternary::groups_for(k, group_size)});
  } else if (scale) {
    a.given = in_ptr<float>(*scale, "scale", {1});
    if (scale->shape(0) == 1 && a.rows != 1)
      a.broadcast.assign(size_t(a.rows), a.given[0]);
    else
      check_shape(*scale, "scale", {a.rows});
  }
  return a;
}

}  // namespace

void bind_ternary(nb::module_& m) {
  m.def("ternary_variants", [] { return variants_to_list(ternary::list_variants()); });

  // pack, unpack and quantize return new numpy arrays, allocated once the inputs are checked.
  m.def("ternary_pack", [](const InArray& w) {
    const auto* wp = in_ptr<int8_t>(w, "w", {2});
    const int64_t rows = int64_t(w.shape(0)), k = int64_t(w.shape(1));
    Output<uint32_t> out = output<uint32_t>(std::nullopt, "out", {rows, ternary::words_for(k)}, "w");
    {
      GilRelease release;
      ternary::pack(wp, rows, k, out.data);
    }
    return std::move(out.array);
  }, nb::arg("w"));

  m.def("ternary_unpack", [](const InArray& packed, int64_t k) {
    check_extent(k, "k", 0);
    const auto* pp = in_ptr<uint32_t>(packed, "packed", {2});
    const int64_t rows = int64_t(packed.shape(0)), words = int64_t(packed.shape(1));
    Output<int8_t> out = output<int8_t>(std::nullopt, "out", {rows, k}, "k");
    {
      GilRelease release;
      ternary::unpack(pp, rows, words, k, out.data);
    }
    return std::move(out.array);
  }, nb::arg("packed"), nb::arg("k"));

  // Returns (packed uint32 (rows, words), scale float32 (rows,)).
  m.def("ternary_quantize", [](const InArray& w, bool per_tensor) {
    const auto* wp = in_ptr<float>(w, "w", {2});
    const int64_t rows = int64_t(w.shape(0)), k = int64_t(w.shape(1));
    Output<uint32_t> packed = output<uint32_t>(std::nullopt, "packed", {rows, ternary::words_for(k)}, "w");
    Output<float> scale = output<float>(std::nullopt, "scale", {rows}, "w");
    {
      GilRelease release;
      ternary::quantize(wp, rows, k, per_tensor, packed.data, scale.data);
    }
    return nb::make_tuple(std::move(packed.array), std::move(scale.array));
  }, nb::arg("w"), nb::arg("per_tensor"));

  // int8: pack the int8 layout too. out: pack straight into it (ternary::prepare_into), a
  // buffer of ternary_prepared_size's bytes for the same arguments.
  m.def(
      "ternary_prepare",
      [](const InArray& packed, int64_t k, std::optional<InArray> scale, const std::string& variant,
         int64_t group_size, int threads, bool int8, const std::optional<OutArray>& out) {
        const PrepareArrays a = prepare_arrays(packed, k, scale, group_size);
        if (out) {
          const int64_t size = ternary::prepared_size(a.rows, a.words, k, a.scale() != nullptr,
                                                      variant, group_size, int8);
          return prepare_into(*out, size, 0.0, [&](const BlobTarget& into) {
            return ternary::prepare_into(a.packed, a.rows, a.words, k, a.scale(), variant, threads,
                                         group_size, int8, into);
          });
        }
        GilRelease release;
        auto w = ternary::prepare(a.packed, a.rows, a.words, k, a.scale(), variant, threads,
                                  group_size);
        if (int8) w->i8_data(threads);
        return std::shared_ptr<const PackedWeights>(std::move(w));
      },
      nb::arg("packed"), nb::arg("k"), nb::arg("scale").none(), nb::arg("variant"),
      nb::arg("group_size") = 0, nb::arg("threads") = 0, nb::arg("int8") = false,
      nb::arg("out").none() = nb::none());
  // The bytes of ternary_prepare's serialised form for these arguments (the size of its out).
  m.def(
      "ternary_prepared_size",
      [](const InArray& packed, int64_t k, std::optional<InArray> scale, const std::string& variant,
         int64_t group_size, bool int8) {
        const PrepareArrays a = prepare_arrays(packed, k, scale, group_size);
        return ternary::prepared_size(a.rows, a.words, k, a.scale() != nullptr, variant,
                                      group_size, int8);
      },
      nb::arg("packed"), nb::arg("k"), nb::arg("scale").none(), nb::arg("variant"),
      nb::arg("group_size"), nb::arg("int8"));

  // variant: "" or the variant the weights were prepared for (checked here: one call per forward).
  m.def(
      "ternary_gemv",
      [](const PackedWeights& packed, const InArray& x, std::optional<InArray> scale,
         const std::string& act, const std::string& variant, int threads,
         const std::optional<OutArray>& out) {
        const PreparedWeights& w = ternary_weights(packed);
        packed.check_variant(variant);
        const auto* xp = in_ptr<float>(x, "x", {1, 2});
        const int64_t batch = x.ndim() == 1 ? 1 : int64_t(x.shape(0));
        ternary::check_x_columns(w, int64_t(x.shape(x.ndim() - 1)), describe_array(x));
        const float* sp = scale ? in_ptr<float>(*scale, "scale", {0, 1}) : nullptr;
        const int64_t scale_len = scale ? int64_t(scale->size()) : 0;  // checked by gemv
        const ternary::Act a = ternary::parse_act(act);
        Output<float> y = output<float>(out, "out", rows_by(x, w.m), "x");
        {
          GilRelease release(double(batch) * double(w.m) * double(w.k));
          ternary::gemv(w, xp, batch, sp, scale_len, a, threads, y.data);
        }
        return std::move(y.array);
      },
      nb::arg("weights"), nb::arg("x"), nb::arg("scale").none(), nb::arg("act"), nb::arg("variant"),
      nb::arg("threads"), nb::arg("out").none());

  // gemv_multi: the matrices of a layer that share x (PackedWeights each), one output each
  // (given: a float32 (batch, m_i) array, or new). Returns the list of outputs.
  m.def(
      "ternary_gemv_multi",
      [](const std::vector<const PackedWeights*>& packed, const InArray& x, const std::string& act,
         int threads, const std::vector<std::optional<OutArray>>& outs) {
        if (packed.empty()) throw_arg("weights", "expected at least one matrix, got none");
        if (outs.size() != packed.size())
          throw_arg("out", "expected one output per matrix (" + std::to_string(packed.size()) +
                               "), got " + std::to_string(outs.size()));
        std::vector<const PreparedWeights*> ws;
        for (const PackedWeights* p : packed) {
          if (p == nullptr) throw_arg("weights", "expected PackedWeights, got None");
          ws.push_back(&ternary_weights(*p));
        }
        const auto* xp = in_ptr<float>(x, "x", {1, 2});
        const int64_t batch = x.ndim() == 1 ? 1 : int64_t(x.shape(0));
        for (const PreparedWeights* w : ws)
          ternary::check_x_columns(*w, int64_t(x.shape(x.ndim() - 1)), describe_array(x));
        const ternary::Act a = ternary::parse_act(act);
        std::vector<Output<float>> ys;
        std::vector<float*> yp;
        double work = 0;
        for (size_t i = 0; i < ws.size(); ++i) {
          ys.push_back(output<float>(outs[i], "out", rows_by(x, ws[i]->m), "x"));
          yp.push_back(ys.back().data);
          work += double(batch) * double(ws[i]->m) * double(ws[i]->k);
        }
        {
          GilRelease release(work);
          ternary::gemv_multi(ws.data(), int64_t(ws.size()), xp, batch, a, threads, yp.data());
        }
        nb::list result;
        for (Output<float>& y : ys) result.append(y.array);
        return result;
      },
      nb::arg("weights"), nb::arg("x"), nb::arg("act"), nb::arg("threads"), nb::arg("outs"));

  // gemv straight from a serialised buffer (the torch op on a prepared uint8 tensor): the
  // header is validated per call (O(1)); no object outlives the call, nothing is cached.
  m.def(
      "ternary_gemv_buffer",
      [](const InArray& buf, int64_t m_expected, const InArray& x, const std::string& act,
         int threads, const std::optional<OutArray>& out) {
        const auto [p, size] = buffer_bytes(buf, "prepared");
        const ternary::Act a = ternary::parse_act(act);
        ternary::ImportOptions o;
        o.arg = "prepared";
        o.allow_reprepare = false;
        auto w = ternary::from_buffer(p, size, nullptr, o);
        if (w->m != m_expected)
          throw_arg("prepared", "holds " + std::to_string(w->m) + " output rows, the op was given " +
                                    std::to_string(m_expected));
        if (a != ternary::Act::kF32 && !w->i8_ready())
          throw_arg("prepared", "has no int8 layout (export it with int8=True) for act='" + act + "'");
        const auto* xp = in_ptr<float>(x, "x", {1, 2});
        const int64_t batch = x.ndim() == 1 ? 1 : int64_t(x.shape(0));
        ternary::check_x_columns(*w, int64_t(x.shape(x.ndim() - 1)), describe_array(x));
        Output<float> y = output<float>(out, "out", rows_by(x, w->m), "x");
        {
          GilRelease release(double(batch) * double(w->m) * double(w->k));
          ternary::gemv(*w, xp, batch, nullptr, 0, a, threads, y.data);
        }
        return std::move(y.array);
      },
      nb::arg("prepared"), nb::arg("m"), nb::arg("x"), nb::arg("act"), nb::arg("threads"),
      nb::arg("out").none());
}

}  // namespace cpukern::ext
