// Bindings of cpukern::moe (see kernels/moe/moe.h). bf16 arrays travel as their 16-bit
// patterns (ml_dtypes.bfloat16 / torch.bfloat16 viewed as 16-bit integers): no copies.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "kernels/moe/moe.h"
#include "python/ext/arrays.h"
#include "python/ext/gil.h"

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

  // Returns new numpy arrays (topk_weights float32 (T, topk), topk_ids int32 (T, topk)),
  // allocated here once topk is known to be valid (moe::route checks it again, but only after
  // the outputs exist; a huge topk must be a ValueError naming it, not an allocation failure).
  m.def(
      "moe_route",
      [](const InArray& logits, int64_t topk, bool renormalize) {
        const auto* lp = in_ptr<float>(logits, "router_logits", {2});
        const int64_t t = int64_t(logits.shape(0)), e = int64_t(logits.shape(1));
        if (e < 1 || e > INT32_MAX)
          throw_arg("router_logits", "expected 1 <= E < 2**31 experts (int32 ids), got " +
                                         describe_array(logits));
        check_arg(topk >= 1 && topk <= e, "topk",
                  "expected 1 <= topk <= E = " + std::to_string(e) + ", got " + std::to_string(topk));
        const int64_t n = checked_mul(t, topk, "topk");
        auto* wp = new float[size_t(n ? n : 1)];
        nb::capsule wown(wp, [](void* p) noexcept { delete[] static_cast<float*>(p); });
        auto* ip = new int32_t[size_t(n ? n : 1)];
        nb::capsule iown(ip, [](void* p) noexcept { delete[] static_cast<int32_t*>(p); });
        {
          GilRelease release;
          moe::route(lp, t, e, topk, renormalize, wp, ip);
        }
        const size_t shape[2] = {size_t(t), size_t(topk)};
        return std::make_pair(nb::ndarray<nb::numpy, float, nb::ndim<2>>(wp, 2, shape, wown),
                              nb::ndarray<nb::numpy, int32_t, nb::ndim<2>>(ip, 2, shape, iown));
      },
      nb::arg("router_logits"), nb::arg("topk"), nb::arg("renormalize"));

  m.def("moe_prepack", [](const InArray& w, const std::string& isa) {
    const auto* wp = in_ptr<uint16_t>(w, "w", {3});
    GilRelease release;
    return moe::prepack(wp, int64_t(w.shape(0)), int64_t(w.shape(1)), int64_t(w.shape(2)), isa);
  });

  m.def(
      "moe_fused_moe",
      [](const InArray& x, const PackedExperts& w13, const PackedExperts& w2,
         const InArray& topk_weights, const InArray& topk_ids, const std::string& activation,
         std::optional<InArray> w13_bias, std::optional<InArray> w2_bias, bool skip_weighted,
         int threads, const OutArray& out) {
        const auto* xp = in_ptr<uint16_t>(x, "x", {2});
        const int64_t t = int64_t(x.shape(0)), h = int64_t(x.shape(1));
        const auto* twp = in_ptr<float>(topk_weights, "topk_weights", {2});
        const auto* tip = in_ptr<int32_t>(topk_ids, "topk_ids", {2});
        // topk is topk_ids' second extent: its range (moe::fused_moe's rule) is named after it.
        const int64_t topk = int64_t(topk_ids.shape(1));
        if (int64_t(topk_ids.shape(0)) != t || topk < 1 || topk > w13.e)
          throw_arg("topk_ids", "expected shape (" + std::to_string(t) + ", topk) with 1 <= topk <= E = " +
                                    std::to_string(w13.e) + ", got " + describe_array(topk_ids));
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
        GilRelease release;
        moe::fused_moe(xp, t, h, w13, w2, twp, tip, topk, act, b13, b2, skip_weighted, threads, op);
      },
      nb::arg("x"), nb::arg("w13"), nb::arg("w2"), nb::arg("topk_weights"), nb::arg("topk_ids"),
      nb::arg("activation"), nb::arg("w13_bias").none(), nb::arg("w2_bias").none(),
      nb::arg("skip_weighted"), nb::arg("threads"), nb::arg("out"));
}

}  // namespace cpukern::ext
