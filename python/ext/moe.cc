// Bindings of cpukern::moe (see kernels/moe/moe.h). bf16 arrays travel as their 16-bit
// patterns (ml_dtypes.bfloat16 / torch.bfloat16 viewed as 16-bit integers): no copies.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "kernels/moe/moe.h"
#include "python/ext/arrays.h"

namespace cpukern::ext {

using moe::PackedExperts;

void bind_moe(nb::module_& m) {
  nb::class_<PackedExperts>(m, "PackedExperts",
                            "bf16 expert weights packed once for one kernel family "
                            "(cpukern.moe.prepack).")
      .def_ro("isa", &PackedExperts::isa)
      .def_prop_ro("shape", [](const PackedExperts& w) { return std::make_tuple(w.e, w.o, w.i); },
                   "(E, O, I) of the unpacked weights.")
      .def_prop_ro("nbytes", &PackedExperts::nbytes)
      .def("__repr__", [](const PackedExperts& w) {
        return "PackedExperts(isa='" + w.isa + "', shape=(" + std::to_string(w.e) + ", " +
               std::to_string(w.o) + ", " + std::to_string(w.i) + "), nbytes=" +
               std::to_string(w.nbytes()) + ")";
      });

  m.def("moe_variants", [] { return variants_to_list(moe::list_variants()); });

  m.def("moe_route", [](const InArray& logits, int64_t topk, bool renormalize,
                        const OutArray& weights, const OutArray& ids) {
    const auto* lp = in_ptr<float>(logits, "router_logits", {2});
    const int64_t t = int64_t(logits.shape(0)), e = int64_t(logits.shape(1));
    check_no_overlap(weights, "topk_weights", {{&logits, "router_logits"}});
    check_no_overlap(ids, "topk_ids", {{&logits, "router_logits"}});
    if (topk < 1 || topk > e)
      throw_arg("topk", "expected 1 <= topk <= E = " + std::to_string(e) + ", got " + std::to_string(topk));
    check_shape(weights, "topk_weights", {t, topk});
    check_shape(ids, "topk_ids", {t, topk});
    auto* wp = out_ptr<float>(weights, "topk_weights", {2});
    auto* ip = out_ptr<int32_t>(ids, "topk_ids", {2});
    nb::gil_scoped_release release;
    moe::route(lp, t, e, topk, renormalize, wp, ip);
  });

  m.def("moe_prepack", [](const InArray& w, const std::string& isa) {
    const auto* wp = in_ptr<uint16_t>(w, "w", {3});
    nb::gil_scoped_release release;
    return moe::prepack(wp, int64_t(w.shape(0)), int64_t(w.shape(1)), int64_t(w.shape(2)), isa);
  });

  m.def(
      "moe_fused_moe",
      [](const InArray& x, const PackedExperts& w13, const PackedExperts& w2,
         const InArray& topk_weights, const InArray& topk_ids, const std::string& activation,
         std::optional<InArray> w13_bias, std::optional<InArray> w2_bias, bool skip_weighted,
         int threads, const OutArray& out) {
        check_threads(threads);
        const auto* xp = in_ptr<uint16_t>(x, "x", {2});
        const int64_t t = int64_t(x.shape(0)), h = int64_t(x.shape(1));
        const auto* twp = in_ptr<float>(topk_weights, "topk_weights", {2});
        const auto* tip = in_ptr<int32_t>(topk_ids, "topk_ids", {2});
        const int64_t topk = int64_t(topk_ids.shape(1));
        check_shape(topk_ids, "topk_ids", {t, topk});
        check_shape(topk_weights, "topk_weights", {t, topk});
        const uint16_t* b13 = nullptr;
        const uint16_t* b2 = nullptr;
        if (w13_bias) {
          b13 = in_ptr<uint16_t>(*w13_bias, "w13_bias", {2});
          check_shape(*w13_bias, "w13_bias", {w13.e, w13.o});
        }
        if (w2_bias) {
          b2 = in_ptr<uint16_t>(*w2_bias, "w2_bias", {2});
          check_shape(*w2_bias, "w2_bias", {w2.e, w2.o});
        }
        check_shape(out, "out", {t, h});
        auto* op = out_ptr<uint16_t>(out, "out", {2});
        check_no_overlap(out, "out",
                         {{&x, "x"},
                          {&topk_weights, "topk_weights"},
                          {&topk_ids, "topk_ids"},
                          {w13_bias ? &*w13_bias : nullptr, "w13_bias"},
                          {w2_bias ? &*w2_bias : nullptr, "w2_bias"}});
        const moe::Activation act = moe::parse_activation(activation);
        nb::gil_scoped_release release;
        moe::fused_moe(xp, t, h, w13, w2, twp, tip, topk, act, b13, b2, skip_weighted, threads, op);
      },
      nb::arg("x"), nb::arg("w13"), nb::arg("w2"), nb::arg("topk_weights"), nb::arg("topk_ids"),
      nb::arg("activation"), nb::arg("w13_bias").none(), nb::arg("w2_bias").none(),
      nb::arg("skip_weighted"), nb::arg("threads"), nb::arg("out"));
}

}  // namespace cpukern::ext
