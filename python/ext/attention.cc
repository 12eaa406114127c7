// Bindings of decode attention (kernels/attention): q (B, Hq, D) contiguous, k and v
// (B, Hkv, L, D) at any non-negative strides with D contiguous (a view of a longer cache),
// float32 or bf16 alike; mask (B or 1, Hq or 1, L) bool or float32 at any strides.
#include <nanobind/stl/string.h>

#include "kernels/attention/attention.h"
#include "kernels/common/limits.h"
#include "python/ext/arrays.h"
#include "python/ext/gil.h"

namespace cpukern::ext {
namespace {

bool is_bf16(const nb::dlpack::dtype& t) {
  return t.bits == 16 && t.lanes == 1 && t.code != uint8_t(nb::dlpack::dtype_code::Float) &&
         t.code != uint8_t(nb::dlpack::dtype_code::Int);
}
bool is_f32(const nb::dlpack::dtype& t) {
  return t.code == uint8_t(nb::dlpack::dtype_code::Float) && t.bits == 32 && t.lanes == 1;
}
bool is_bool(const nb::dlpack::dtype& t) {
  return t.code == uint8_t(nb::dlpack::dtype_code::Bool) && t.bits == 8 && t.lanes == 1;
}

// Element strides of a strided array of `ndim` dims, checked: non-negative, and an extent of
// 1 reads its one element (stride 0).
void strides_of(const InArray& a, const char* arg, int64_t* out) {
  for (size_t i = 0; i < a.ndim(); ++i) {
    const int64_t s = int64_t(a.stride(i));
    if (s < 0) throw_arg(arg, "expected non-negative strides, got " + describe_array(a));
    out[i] = a.shape(i) == 1 ? 0 : s;
  }
}

// The bytes from an array's first element to one past its last (strided).
int64_t span_bytes(const InArray& a, int64_t elem) {
  int64_t last = 0;
  for (size_t i = 0; i < a.ndim(); ++i) {
    if (a.shape(i) == 0) return 0;
    last += (int64_t(a.shape(i)) - 1) * int64_t(a.stride(i));
  }
  return (last + 1) * elem;
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def("attention_variants", [] { return variants_to_list(attention::list_variants()); });

  m.def(
      "attention_decode",
      [](const InArray& q, const InArray& k, const InArray& v, std::optional<InArray> mask,
         std::optional<InArray> sinks, double scale, bool nan_if_empty,
         const std::string& variant, int threads, const std::optional<OutArray>& out) {
        attention::DecodeArgs a;
        const bool bf16 = is_bf16(q.dtype());
        if (bf16)
          check<uint16_t>(q, "query", {3});
        else
          check<float>(q, "query", {3});
        a.dtype = bf16 ? attention::Dtype::kBf16 : attention::Dtype::kF32;
        const int64_t elem = bf16 ? 2 : 4;
        a.batch = int64_t(q.shape(0)), a.q_heads = int64_t(q.shape(1));
        a.head_dim = int64_t(q.shape(2));
        for (const auto& [arr, name, st] :
             {std::tuple{&k, "key", a.k_stride}, std::tuple{&v, "value", a.v_stride}}) {
          const bool same = bf16 ? is_bf16(arr->dtype()) : is_f32(arr->dtype());
          if (!same || arr->ndim() != 4)
            throw_type(name, std::string("expected a 4-dim ") + (bf16 ? "bfloat16" : "float32") +
                                 " array (B, Hkv, L, D) like query's dtype, got " +
                                 describe_array(*arr));
          int64_t s4[4];
          strides_of(*arr, name, s4);
          if (arr->shape(3) > 1 && s4[3] != 1)
            throw_arg(name, "expected its last dimension contiguous, got strides of a view " +
                                describe_array(*arr));
          std::copy(s4, s4 + 3, st);
        }
        for (size_t i = 0; i < 4; ++i)
          if (k.shape(i) != v.shape(i))
            throw_arg("value", "expected the shape of key, got " + describe_array(v) + " and " +
                                   describe_array(k));
        a.kv_heads = int64_t(k.shape(1)), a.length = int64_t(k.shape(2));
        if (int64_t(k.shape(0)) != a.batch || int64_t(k.shape(3)) != a.head_dim)
          throw_arg("key", "expected (B, Hkv, L, D) with query's B = " + std::to_string(a.batch) +
                               " and D = " + std::to_string(a.head_dim) + ", got " +
                               describe_array(k));
        if (a.kv_heads < 1 || a.q_heads % a.kv_heads != 0)
          throw_arg("key", "expected a number of heads that divides query's " +
                               std::to_string(a.q_heads) + ", got " + describe_array(k));
        if (mask) {
          const bool b8 = is_bool(mask->dtype()), f32 = is_f32(mask->dtype());
          if (!(b8 || f32) || mask->ndim() != 3)
            throw_type("mask", "expected a 3-dim bool or float32 array (B or 1, Hq or 1, L), got " +
                                   describe_array(*mask));
          const int64_t mb = int64_t(mask->shape(0)), mh = int64_t(mask->shape(1));
          if ((mb != 1 && mb != a.batch) || (mh != 1 && mh != a.q_heads) ||
              int64_t(mask->shape(2)) != a.length)
            throw_arg("mask", "expected (B or 1, Hq or 1, L) = (" + std::to_string(a.batch) +
                                  " or 1, " + std::to_string(a.q_heads) + " or 1, " +
                                  std::to_string(a.length) + "), got " + describe_array(*mask));
          strides_of(*mask, "mask", a.mask_stride);
          a.mask_kind = b8 ? attention::MaskKind::kBool : attention::MaskKind::kF32;
          a.mask = mask->data();
        }
        if (sinks) {
          a.sinks = in_ptr<float>(*sinks, "sinks", {1});
          check_shape(*sinks, "sinks", {a.q_heads});
        }
        a.scale = float(scale);
        if (!std::isfinite(a.scale))
          throw_arg("scale", "expected a finite number, got " + std::to_string(scale));
        a.nan_if_empty = nan_if_empty;
        a.q = q.data(), a.k = k.data(), a.v = v.data();
        const std::vector<int64_t> shape = {a.batch, a.q_heads, a.head_dim};
        nb::object result;
        if (bf16) {
          Output<uint16_t> o = output<uint16_t>(out, "out", shape, "query");
          a.out = o.data, result = o.array;
        } else {
          Output<float> o = output<float>(out, "out", shape, "query");
          a.out = o.data, result = o.array;
        }
        check_disjoint(a.out, a.batch * a.q_heads * a.head_dim * elem, "out",
                       {{a.q, span_bytes(q, elem), "query"},
                        {a.k, span_bytes(k, elem), "key"},
                        {a.v, span_bytes(v, elem), "value"},
                        {a.mask, mask ? span_bytes(*mask, is_bool(mask->dtype()) ? 1 : 4) : 0,
                         "mask"},
                        {a.sinks, sinks ? span_bytes(*sinks, 4) : 0, "sinks"}});
        {
          GilRelease release(double(a.batch) * double(a.q_heads) * double(a.length) *
                             double(a.head_dim));
          attention::decode(a, variant, threads);
        }
        return result;
      },
      nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("mask").none(),
      nb::arg("sinks").none(), nb::arg("scale"), nb::arg("nan_if_empty"), nb::arg("variant"),
      nb::arg("threads"), nb::arg("out").none());
}

}  // namespace cpukern::ext
