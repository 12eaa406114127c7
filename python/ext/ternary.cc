// Bindings of cpukern::ternary (see kernels/ternary/ternary.h).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include "kernels/ternary/ternary.h"
#include "python/ext/arrays.h"
#include "python/ext/gil.h"
#include "python/ext/prepared.h"

namespace cpukern::ext {

using ternary::PreparedWeights;

void bind_ternary(nb::module_& m) {
  nb::class_<PreparedWeights>(m, "TernaryWeights",
                              "Ternary weights converted once into one kernel's layout "
                              "(cpukern.ternary.prepare).")
      .def_ro("isa", &PreparedWeights::isa, "The variant whose layout this is.")
      .def_prop_ro("shape", [](const PreparedWeights& w) { return std::make_pair(w.m, w.k); },
                   "(M, K) of the logical weight matrix.")
      .def_prop_ro("nbytes", &PreparedWeights::nbytes, "Bytes of the prepared layout.")
      .def_prop_ro("has_scale", [](const PreparedWeights& w) { return w.has_scale(); })
      .def_ro("group_size", &PreparedWeights::group_size,
              "G when the scale is per row and group of G columns, else 0.")
      .def_prop_ro("is_view", [](const PreparedWeights& w) { return w.layout_view != nullptr; },
                   "True when the layout views a serialised buffer (from_buffer, zero-copy).")
      .def_prop_ro("int8_ready", &PreparedWeights::i8_ready,
                   "True when act='int8' needs no packing (the int8 layout exists).")
      // to_bytes and __reduce__ (pickling) are set by cpukern.ternary, in Python: a binding
      // that calls back into Python could be ended there by interpreter exit (gil.h).
      .def("__repr__", [](const PreparedWeights& w) {
        return "TernaryWeights(isa='" + w.isa + "', shape=(" + std::to_string(w.m) + ", " +
               std::to_string(w.k) + "), nbytes=" + std::to_string(w.nbytes()) + ")";
      });

  m.def(
      "ternary_serialized_size",
      [](const PreparedWeights& w, bool int8) { return ternary::serialized_size(w, int8); },
      nb::arg("weights"), nb::arg("int8"));
  m.def(
      "ternary_serialize",
      [](const PreparedWeights& w, bool int8, int threads, const OutArray& out) {
        const int64_t size = ternary::serialized_size(w, int8);
        unsigned char* p = out_bytes(out, "out", size);
        GilRelease release;
        ternary::serialize(w, int8, threads, p, size);
      },
      nb::arg("weights"), nb::arg("int8"), nb::arg("threads"), nb::arg("out"));
  m.def(
      "ternary_from_buffer",
      [](const InArray& buf, bool verify, const std::string& isa, int threads, const char* arg) {
        bool reprepared = false;
        auto w = import_buffer(buf, arg, [&](const unsigned char* p, int64_t size, auto owner) {
          ternary::ImportOptions o;
          o.verify = verify;
          o.isa = isa;
          o.threads = threads;
          o.arg = arg;
          o.reprepared = &reprepared;
          return ternary::from_buffer(p, size, owner, o);
        });
        return std::make_pair(w, reprepared);
      },
      nb::arg("buffer"), nb::arg("verify"), nb::arg("isa"), nb::arg("threads"), nb::arg("arg"));

  m.def("ternary_variants", [] { return variants_to_list(ternary::list_variants()); });

  m.def("ternary_pack", [](const InArray& w, const OutArray& out) {
    const auto* wp = in_ptr<int8_t>(w, "w", {2});
    const int64_t rows = int64_t(w.shape(0)), k = int64_t(w.shape(1));
    check_shape(out, "out", {rows, ternary::words_for(k)});
    auto* op = out_ptr<uint32_t>(out, "out", {2});
    GilRelease release;
    ternary::pack(wp, rows, k, op);
  });

  m.def("ternary_unpack", [](const InArray& packed, int64_t k, const OutArray& out) {
    check_extent(k, "k", 0);
    const auto* pp = in_ptr<uint32_t>(packed, "packed", {2});
    const int64_t rows = int64_t(packed.shape(0)), words = int64_t(packed.shape(1));
    check_shape(out, "out", {rows, k});
    auto* op = out_ptr<int8_t>(out, "out", {2});
    GilRelease release;
    ternary::unpack(pp, rows, words, k, op);
  });

  m.def("ternary_quantize",
        [](const InArray& w, bool per_tensor, const OutArray& packed, const OutArray& scale) {
          const auto* wp = in_ptr<float>(w, "w", {2});
          const int64_t rows = int64_t(w.shape(0)), k = int64_t(w.shape(1));
          check_shape(packed, "packed", {rows, ternary::words_for(k)});
          check_shape(scale, "scale", {rows});
          auto* pp = out_ptr<uint32_t>(packed, "packed", {2});
          auto* sp = out_ptr<float>(scale, "scale", {1});
          GilRelease release;
          ternary::quantize(wp, rows, k, per_tensor, pp, sp);
        });

  m.def(
      "ternary_prepare",
      [](const InArray& packed, int64_t k, std::optional<InArray> scale, const std::string& isa,
         int64_t group_size, int threads) {
        check_extent(k, "k", 0);
        const auto* pp = in_ptr<uint32_t>(packed, "packed", {2});
        const int64_t rows = int64_t(packed.shape(0)), words = int64_t(packed.shape(1));
        const float* sp = nullptr;
        if (scale && group_size > 0) {
          sp = in_ptr<float>(*scale, "scale", {2});
          check_shape(*scale, "scale", {rows, ternary::groups_for(k, group_size)});
        } else if (scale) {
          sp = in_ptr<float>(*scale, "scale", {1});
          check_shape(*scale, "scale", {rows});
        }
        GilRelease release;
        return ternary::prepare(pp, rows, words, k, sp, isa, threads, group_size);
      },
      nb::arg("packed"), nb::arg("k"), nb::arg("scale").none(), nb::arg("isa"),
      nb::arg("group_size") = 0, nb::arg("threads") = 0);

  m.def(
      "ternary_gemv",
      [](const PreparedWeights& w, const InArray& x, std::optional<InArray> scale,
         const std::string& act, int threads, const OutArray& out) {
        const auto* xp = in_ptr<float>(x, "x", {1, 2});
        const int64_t batch = x.ndim() == 1 ? 1 : int64_t(x.shape(0));
        ternary::check_x_columns(w, int64_t(x.shape(x.ndim() - 1)), describe_array(x));
        if (x.ndim() == 1)
          check_shape(out, "out", {w.m});
        else
          check_shape(out, "out", {batch, w.m});
        auto* yp = out_ptr<float>(out, "out", {1, 2});
        const float* sp = scale ? in_ptr<float>(*scale, "scale", {0, 1}) : nullptr;
        const int64_t scale_len = scale ? int64_t(scale->size()) : 0;  // checked by gemv
        const ternary::Act a = ternary::parse_act(act);
        GilRelease release(double(batch) * double(w.m) * double(w.k));
        ternary::gemv(w, xp, batch, sp, scale_len, a, threads, yp);
      },
      nb::arg("weights"), nb::arg("x"), nb::arg("scale").none(), nb::arg("act"),
      nb::arg("threads"), nb::arg("out"));

  // gemv straight from a serialised buffer (the torch op on a prepared uint8 tensor): the
  // header is validated per call (O(1)); no object outlives the call, nothing is cached.
  m.def(
      "ternary_gemv_buffer",
      [](const InArray& buf, int64_t m_expected, const InArray& x, const std::string& act,
         int threads, const OutArray& out) {
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
        if (x.ndim() == 1)
          check_shape(out, "out", {w->m});
        else
          check_shape(out, "out", {batch, w->m});
        auto* yp = out_ptr<float>(out, "out", {1, 2});
        GilRelease release(double(batch) * double(w->m) * double(w->k));
        ternary::gemv(*w, xp, batch, nullptr, 0, a, threads, yp);
      },
      nb::arg("prepared"), nb::arg("m"), nb::arg("x"), nb::arg("act"), nb::arg("threads"),
      nb::arg("out"));
}

}  // namespace cpukern::ext
