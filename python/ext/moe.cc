// Bindings of cpukern::moe (see kernels/moe/moe.h). bf16 arrays travel as their 16-bit
// patterns (ml_dtypes.bfloat16 / torch.bfloat16 viewed as 16-bit integers): no copies.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <string>
#include <vector>

#include "kernels/moe/int8.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/mxfp4.h"
#include "python/ext/arrays.h"
#include "python/ext/gil.h"
#include "python/ext/prepared.h"

namespace cpukern::ext {

using moe::PackedExperts;

namespace {

const PackedExperts& experts(const PackedWeights& w, const char* arg) {
  return weights_of<PackedExperts>(w, arg, "PackedWeights from cpukern.moe.prepare");
}

// "[i, j, k]": the multi-index of flat index `flat` in an array of `shape`.
std::string index_str(const std::vector<int64_t>& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  std::string s;
  for (int64_t v : idx) s += (s.empty() ? "" : ", ") + std::to_string(v);
  return "[" + s + "]";
}

// prepare's arrays of the format prepare_format names (format, act, scales given or not),
// checked here (their values by moe::prepare*). bf16: w (E, O, I). MXFP4: w = blocks uint8
// (E, O, I/32, 16), scales uint8 (E, O, I/32) (gpt-oss's layout). int8: w int8 (E, O, I),
// scales float32 (E, O).
struct ExpertArrays {
  moe::WeightFormat format;
  const void* w;
  const void* scales;
  int64_t e, o, i;
  double work;  // weights touched (GilRelease)
};

ExpertArrays expert_arrays(const InArray& w, const std::optional<InArray>& scales,
                           const std::string& format, const std::string& act) {
  const moe::WeightFormat f = moe::prepare_format(format, act, scales.has_value());
  if (f == moe::WeightFormat::kBf16) {
    const auto* wp = in_ptr<uint16_t>(w, "w", {3});
    return {f, wp, nullptr, int64_t(w.shape(0)), int64_t(w.shape(1)), int64_t(w.shape(2)),
            double(w.size())};
  }
  if (f == moe::WeightFormat::kInt8) {
    const auto* qp = in_ptr<int8_t>(w, "w", {3});
    const auto* sp = in_ptr<float>(*scales, "scales", {2});
    const int64_t e = int64_t(w.shape(0)), o = int64_t(w.shape(1)), i = int64_t(w.shape(2));
    check_shape(*scales, "scales", {e, o});
    return {f, qp, sp, e, o, i, double(w.size())};
  }
  const auto* bp = in_ptr<uint8_t>(w, "w", {4});
  const auto* sp = in_ptr<uint8_t>(*scales, "scales", {3});
  const int64_t e = int64_t(w.shape(0)), o = int64_t(w.shape(1)), nb = int64_t(w.shape(2));
  if (w.shape(3) != moe::mxfp4::kBlockBytes)
    throw_arg("w", "expected MXFP4 blocks (E, O, I/32, 16), got " + describe_array(w));
  check_shape(*scales, "scales", {e, o, nb});
  return {f, bp, sp, e, o, nb * moe::mxfp4::kBlock, double(w.size()) * 2.0};
}

// The experts packed for `variant` (into: straight into that serialised buffer).
std::shared_ptr<const PackedWeights> pack_experts(const ExpertArrays& a, const std::string& variant,
                                                  const BlobTarget* into) {
  if (a.format == moe::WeightFormat::kBf16)
    return moe::prepare(static_cast<const uint16_t*>(a.w), a.e, a.o, a.i, variant, into);
  if (a.format == moe::WeightFormat::kInt8)
    return moe::prepare_int8(static_cast<const int8_t*>(a.w), static_cast<const float*>(a.scales),
                             a.e, a.o, a.i, variant, into);
  return moe::prepare_mxfp4(static_cast<const uint8_t*>(a.w), static_cast<const uint8_t*>(a.scales),
                            a.e, a.o, a.i, variant, a.format, into);
}

}  // namespace

void bind_moe(nb::module_& m) {
  m.def("moe_variants", [] { return variants_to_list(moe::list_variants()); });
  // The dense layer's op "linear": fused_moe's rows under its own name (moe.h).
  m.def("linear_variants", [] { return variants_to_list(moe::list_linear_variants()); });
  m.def(
      "linear_variant",
      [](const std::string& variant) { return moe::linear_variant(variant); },
      nb::arg("variant"));

  // Returns new numpy arrays (topk_weights float32 (T, topk), topk_ids int32 (T, topk)),
  // allocated here once topk is known to be valid (moe::route checks it again, but only after
  // the outputs exist; a huge topk must be a ValueError naming it, not an allocation failure).
  m.def(
      "moe_route",
      [](const InArray& logits, int64_t topk, bool renormalize, const std::string& rule) {
        const moe::RouteRule r = moe::parse_route_rule(rule);
        const auto* lp = in_ptr<float>(logits, "router_logits", {2});
        const int64_t t = int64_t(logits.shape(0)), e = int64_t(logits.shape(1));
        if (e < 1 || e > INT32_MAX)
          throw_arg("router_logits", "expected 1 <= E < 2**31 experts (int32 ids), got " +
                                         describe_array(logits));
        check_arg(topk >= 1 && topk <= e, "topk",
                  "expected 1 <= topk <= E = " + std::to_string(e) + ", got " + std::to_string(topk));
        check_arg(!(renormalize && r == moe::RouteRule::kTopkSoftmax), "renormalize",
                  "topk_softmax weights already sum to 1; pass renormalize=False");
        const int64_t n = checked_mul(t, topk, "topk");
        auto* wp = new float[size_t(n ? n : 1)];
        nb::capsule wown(wp, [](void* p) noexcept { delete[] static_cast<float*>(p); });
        auto* ip = new int32_t[size_t(n ? n : 1)];
        nb::capsule iown(ip, [](void* p) noexcept { delete[] static_cast<int32_t*>(p); });
        {
          GilRelease release;
          moe::route(lp, t, e, topk, renormalize, wp, ip, r);
        }
        const size_t shape[2] = {size_t(t), size_t(topk)};
        return std::make_pair(nb::ndarray<nb::numpy, float, nb::ndim<2>>(wp, 2, shape, wown),
                              nb::ndarray<nb::numpy, int32_t, nb::ndim<2>>(ip, 2, shape, iown));
      },
      nb::arg("router_logits"), nb::arg("topk"), nb::arg("renormalize"), nb::arg("rule"));

  // router(x, w, bias, topk, rule, renormalize, threads, logits, weights, ids): moe::router
  // into the three outputs (each given, or new: logits bf16 (T, E), weights bf16 (T, topk),
  // ids int64 (T, topk)), topk and rule checked before any is allocated.
  m.def(
      "moe_router",
      [](const InArray& x, const PackedWeights& packed, std::optional<InArray> bias, int64_t topk,
         const std::string& rule, bool renormalize, int threads,
         const std::optional<OutArray>& logits_out, const std::optional<OutArray>& weights_out,
         const std::optional<OutArray>& ids_out) {
        const PackedExperts& w = experts(packed, "w");
        const moe::RouteRule r = moe::parse_route_rule(rule);
        const auto* xp = in_ptr<uint16_t>(x, "x", {2});
        const int64_t t = int64_t(x.shape(0)), h = int64_t(x.shape(1));
        if (h != w.i)
          throw_arg("x", "expected (T, " + std::to_string(w.i) + ") (w's in-features), got " +
                             describe_array(x));
        check_arg(w.e == 1, "w", "expected the router's matrix packed as E = 1, got E = " +
                                     std::to_string(w.e));
        check_arg(topk >= 1 && topk <= w.o, "topk",
                  "expected 1 <= topk <= E = " + std::to_string(w.o) + ", got " +
                      std::to_string(topk));
        const uint16_t* bp = nullptr;
        if (bias) {
          bp = in_ptr<uint16_t>(*bias, "bias", {1});
          check_shape(*bias, "bias", {w.o});
        }
        Output<uint16_t> logits = output<uint16_t>(logits_out, "logits", {t, w.o}, "x");
        Output<uint16_t> weights = output<uint16_t>(weights_out, "weights", {t, topk}, "x");
        Output<int64_t> ids = output<int64_t>(ids_out, "ids", {t, topk}, "x");
        {
          GilRelease release(double(t) * double(w.o) * double(w.i));
          moe::router(xp, t, h, w, bp, topk, r, renormalize, threads, logits.data, weights.data,
                      ids.data);
        }
        return nb::make_tuple(logits.array, weights.array, ids.array);
      },
      nb::arg("x"), nb::arg("w"), nb::arg("bias").none(), nb::arg("topk"), nb::arg("rule"),
      nb::arg("renormalize"), nb::arg("threads"), nb::arg("logits").none(),
      nb::arg("weights").none(), nb::arg("ids").none());

  // prepare(w, scales, format, act, variant, out): prepare_format's rules first (format, act,
  // scales given or not), then the arrays of that format (expert_arrays). out: pack straight
  // into it (moe::prepare*'s into), a buffer of moe_prepared_size's bytes.
  m.def("moe_prepare", [](const InArray& w, std::optional<InArray> scales, const std::string& format,
                          const std::string& act, const std::string& variant,
                          const std::optional<OutArray>& out) {
    const ExpertArrays a = expert_arrays(w, scales, format, act);
    if (out)
      return prepare_into(*out, moe::prepared_size(a.format, a.e, a.o, a.i, variant), a.work,
                          [&](const BlobTarget& into) { return pack_experts(a, variant, &into); });
    GilRelease release(a.work);
    return pack_experts(a, variant, nullptr);
  }, nb::arg("w"), nb::arg("scales").none(), nb::arg("format"), nb::arg("act"), nb::arg("variant"),
     nb::arg("out").none() = nb::none());
  // The bytes of moe_prepare's serialised form for these arguments (the size of its out).
  m.def("moe_prepared_size", [](const InArray& w, std::optional<InArray> scales,
                                const std::string& format, const std::string& act,
                                const std::string& variant) {
    const ExpertArrays a = expert_arrays(w, scales, format, act);
    return moe::prepared_size(a.format, a.e, a.o, a.i, variant);
  }, nb::arg("w"), nb::arg("scales").none(), nb::arg("format"), nb::arg("act"), nb::arg("variant"));

  // Weight quantisation of bf16 w (..., K): returns new numpy arrays, int8: (q int8 (..., K),
  // scales float32 (...)); mxfp4: (blocks uint8 (..., K/32, 16), scales uint8 (..., K/32)).
  m.def("moe_int8_quantize", [](const InArray& w) {
    const auto* wp = in_ptr<uint16_t>(w, "w", {1, 2, 3, 4, 5, 6, 7, 8});
    std::vector<int64_t> rows_shape = array_shape(w);
    const int64_t k = rows_shape.back();
    moe::check_quantize_k(moe::WeightFormat::kInt8, k, describe_array(w));
    rows_shape.pop_back();
    const int64_t n = int64_t(w.size()) / k;
    Output<int8_t> q = output<int8_t>(std::nullopt, "q", array_shape(w), "w");
    Output<float> sc = output<float>(std::nullopt, "scales", rows_shape, "w");
    int64_t bad;
    {
      GilRelease release(double(w.size()));
      bad = moe::int8::quantize_weights(wp, n, k, q.data, sc.data);
    }
    if (bad >= 0)
      throw_arg("w", "non-finite weight at row " + std::to_string(bad / k) + ", column " +
                         std::to_string(bad % k) + ": int8 quantisation needs finite weights");
    return nb::make_tuple(std::move(q.array), std::move(sc.array));
  }, nb::arg("w"));

  m.def("moe_mxfp4_quantize", [](const InArray& w) {
    const auto* wp = in_ptr<uint16_t>(w, "w", {1, 2, 3, 4, 5, 6, 7, 8});
    std::vector<int64_t> shape = array_shape(w);
    moe::check_quantize_k(moe::WeightFormat::kMxfp4, shape.back(), describe_array(w));
    shape.back() /= moe::mxfp4::kBlock;
    const int64_t n = int64_t(w.size()) / moe::mxfp4::kBlock;
    Output<uint8_t> sc = output<uint8_t>(std::nullopt, "scales", shape, "w");
    shape.push_back(moe::mxfp4::kBlockBytes);
    Output<uint8_t> blocks = output<uint8_t>(std::nullopt, "blocks", shape, "w");
    {
      GilRelease release;
      moe::mxfp4::quantize(wp, n, moe::mxfp4::kBlock, blocks.data, sc.data);
    }
    return nb::make_tuple(std::move(blocks.array), std::move(sc.array));
  }, nb::arg("w"));

  // MXFP4 blocks uint8 (..., K/32, 16) and scales uint8 (..., K/32) -> bf16 (..., K), a new
  // uint16 numpy array of bf16 bits; errors name "blocks" and "scales" (cpukern.moe.dequantize's
  // arguments).
  m.def("moe_mxfp4_dequantize", [](const InArray& blocks, const InArray& scales) {
    const auto* bp = in_ptr<uint8_t>(blocks, "blocks", {2, 3, 4, 5, 6, 7, 8});
    const auto* sp = in_ptr<uint8_t>(scales, "scales", {1, 2, 3, 4, 5, 6, 7});
    std::vector<int64_t> want = array_shape(scales);
    want.push_back(moe::mxfp4::kBlockBytes);
    if (array_shape(blocks) != want)
      throw_arg("blocks", "expected shape scales.shape + (16,) = " + shape_str(want.size(), want.data()) +
                              ", got " + describe_array(blocks));
    want.pop_back();
    want.back() *= moe::mxfp4::kBlock;
    const int64_t n = int64_t(scales.size());
    const int64_t bad = moe::mxfp4::first_nan_scale(sp, n);
    if (bad >= 0)
      throw_arg("scales", "e8m0 scale 255 (NaN) at flat index " + std::to_string(bad) +
                              ": NaN scales are refused");
    Output<uint16_t> out = output<uint16_t>(std::nullopt, "out", want, "scales");
    {
      GilRelease release;
      moe::mxfp4::dequantize(bp, sp, n, moe::mxfp4::kBlock, out.data);
    }
    return std::move(out.array);
  }, nb::arg("blocks"), nb::arg("scales"));

  // int8 weights q int8 (..., K) and scales float32 (...) -> float32 (..., K) = q * s (the
  // weights the int8 kernels multiply by), a new numpy array; prepare_int8's rules (no -128,
  // scales finite and >= 0), errors naming "blocks" and "scales" (cpukern.moe.dequantize's
  // arguments).
  m.def("moe_int8_dequantize", [](const InArray& q, const InArray& scales) {
    const auto* qp = in_ptr<int8_t>(q, "blocks", {1, 2, 3, 4, 5, 6, 7, 8});
    const auto* sp = in_ptr<float>(scales, "scales", {0, 1, 2, 3, 4, 5, 6, 7});
    std::vector<int64_t> rows = array_shape(q);
    const int64_t k = rows.back();
    rows.pop_back();
    if (array_shape(scales) != rows)
      throw_arg("scales", "expected shape " + shape_str(rows.size(), rows.data()) +
                              " (one per row of blocks), got " + describe_array(scales));
    const int64_t n = int64_t(scales.size());
    if (const int64_t r = moe::int8::first_bad_scale(sp, n); r >= 0)
      throw_arg("scales", "scale " + std::to_string(sp[r]) + " at index " +
                              index_str(rows, r) + ": int8 scales must be finite and >= 0");
    if (const int64_t at = moe::int8::first_minus_128(qp, n * k); at >= 0)
      throw_arg("blocks", "int8 weight -128 at index " + index_str(array_shape(q), at) +
                              ": symmetric int8 weights must lie in [-127, 127]");
    Output<float> out = output<float>(std::nullopt, "out", array_shape(q), "blocks");
    {
      GilRelease release;
      moe::int8::dequantize(qp, sp, n, k, out.data);
    }
    return std::move(out.array);
  }, nb::arg("blocks"), nb::arg("scales"));

  m.def(
      "moe_linear",
      [](const InArray& x, const PackedWeights& packed, std::optional<InArray> bias,
         const std::string& variant, int threads, const std::optional<OutArray>& out) {
        const PackedExperts& w = experts(packed, "w");
        packed.check_variant(variant);  // "" or the variant w was packed for
        const auto* xp = in_ptr<uint16_t>(x, "x", {2});
        const int64_t t = int64_t(x.shape(0)), k = int64_t(x.shape(1));
        if (k != w.i)
          throw_arg("x", "expected (T, " + std::to_string(w.i) + ") (w's in-features), got " +
                             describe_array(x));
        const uint16_t* bp = nullptr;
        if (bias) {
          bp = in_ptr<uint16_t>(*bias, "bias", {1});
          check_shape(*bias, "bias", {w.o});
        }
        Output<uint16_t> y = output<uint16_t>(out, "out", {t, w.o}, "x");
        {
          GilRelease release(double(t) * double(w.o) * double(w.i));
          moe::linear(xp, t, k, w, bp, threads, y.data);
        }
        return std::move(y.array);
      },
      nb::arg("x"), nb::arg("w"), nb::arg("bias").none(), nb::arg("variant"), nb::arg("threads"),
      nb::arg("out").none());

  m.def(
      "moe_fused_moe",
      [](const InArray& x, const PackedWeights& packed13, const PackedWeights& packed2,
         const InArray& topk_weights, const InArray& topk_ids, bool int64_ids,
         const std::string& activation,
         std::optional<InArray> w13_bias, std::optional<InArray> w2_bias, bool skip_weighted,
         const std::string& variant, int threads, const std::optional<OutArray>& out) {
        const PackedExperts& w13 = experts(packed13, "w13");
        const PackedExperts& w2 = experts(packed2, "w2");
        // "" or w13's variant (w2's: moe::fused_moe checks it is w13's)
        packed13.check_variant(variant);
        const auto* xp = in_ptr<uint16_t>(x, "x", {2});
        const int64_t t = int64_t(x.shape(0)), h = int64_t(x.shape(1));
        const auto* twp = in_ptr<float>(topk_weights, "topk_weights", {2});
        // int32 ids, or with int64_ids also int64 (torch.topk's; cpukern.torch passes them
        // unconverted): moe::fused_moe range-checks them before narrowing.
        const nb::dlpack::dtype id_type = topk_ids.dtype();
        const bool wide_ids = int64_ids && id_type.code == uint8_t(nb::dlpack::dtype_code::Int) &&
                              id_type.bits == 64;
        const int32_t* tip = wide_ids ? nullptr : in_ptr<int32_t>(topk_ids, "topk_ids", {2});
        const int64_t* tip64 = wide_ids ? in_ptr<int64_t>(topk_ids, "topk_ids", {2}) : nullptr;
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
        const moe::Activation act = moe::parse_activation(activation);
        Output<uint16_t> y = output<uint16_t>(out, "out", {t, h}, "x");
        {
          GilRelease release(double(t) * double(topk) * 3.0 * double(w2.o) * double(w2.i));
          if (wide_ids)
            moe::fused_moe_int64_ids(xp, t, h, w13, w2, twp, tip64, topk, act, b13, b2,
                                     skip_weighted, threads, y.data);
          else
            moe::fused_moe(xp, t, h, w13, w2, twp, tip, topk, act, b13, b2, skip_weighted, threads,
                           y.data);
        }
        return std::move(y.array);
      },
      nb::arg("x"), nb::arg("w13"), nb::arg("w2"), nb::arg("topk_weights"), nb::arg("topk_ids"),
      nb::arg("int64_ids"), nb::arg("activation"), nb::arg("w13_bias").none(), nb::arg("w2_bias").none(),
      nb::arg("skip_weighted"), nb::arg("variant"), nb::arg("threads"), nb::arg("out").none());
}

}  // namespace cpukern::ext
