// Zero-copy array views for the extension: every check names the argument and uses the
// same wording ("x: expected a C-contiguous float32 CPU array, got ...").
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/registry.h"

namespace cpukern::ext {

namespace nb = nanobind;
using InArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::device::cpu>;

template <class T>
const char* dtype_name();
template <> inline const char* dtype_name<float>() { return "float32"; }
template <> inline const char* dtype_name<double>() { return "float64"; }
template <> inline const char* dtype_name<int8_t>() { return "int8"; }
template <> inline const char* dtype_name<int32_t>() { return "int32"; }
template <> inline const char* dtype_name<int64_t>() { return "int64"; }
template <> inline const char* dtype_name<uint32_t>() { return "uint32"; }
template <> inline const char* dtype_name<uint16_t>() { return "bfloat16"; }  // bf16 bits

std::string describe(const nb::dlpack::dtype& dt);
std::string shape_str(size_t ndim, const int64_t* shape);

template <class Array>
std::vector<int64_t> array_shape(const Array& a) {
  std::vector<int64_t> shape(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) shape[i] = int64_t(a.shape(i));
  return shape;
}

template <class Array>
std::string describe_array(const Array& a) {
  const std::vector<int64_t> shape = array_shape(a);
  return describe(a.dtype()) + " array of shape " + shape_str(shape.size(), shape.data());
}

// numpy's rule: a zero-size array is contiguous whatever its strides (numpy gives (0, 0) to
// some, and torch / DLPack strides of empty tensors are arbitrary).
template <class Array>
bool c_contiguous(const Array& a) {
  for (size_t i = 0; i < a.ndim(); ++i)
    if (a.shape(i) == 0) return true;
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) return false;
    expect *= int64_t(a.shape(i));
  }
  return true;
}

// Checks dtype T (bf16 travels as its 16-bit pattern: numpy bfloat16 viewed as uint16, torch
// bfloat16) and C-contiguity: TypeMismatch naming `arg`.
template <class T, class Array>
void check_layout(const Array& a, const char* arg) {
  const nb::dlpack::dtype want = nb::dtype<T>();
  const auto got = a.dtype();
  const bool bf16_bits = std::is_same_v<T, uint16_t> &&
                         ((got.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && got.bits == 16) ||
                          (got.bits == 16 && got.code != uint8_t(nb::dlpack::dtype_code::Float)));
  const bool dtype_ok = bf16_bits || (got.code == want.code && got.bits == want.bits && got.lanes == 1);
  if (!dtype_ok || !c_contiguous(a)) {
    // An accepted 16-bit pattern is bfloat16 (numpy's arrive as their uint16 view).
    const std::vector<int64_t> shape = array_shape(a);
    const std::string what = bf16_bits ? "bfloat16 array of shape " + shape_str(shape.size(), shape.data())
                                       : describe_array(a);
    throw_type(arg, std::string("expected a C-contiguous ") + dtype_name<T>() + " CPU array, got " +
                        (c_contiguous(a) ? "" : "a non-contiguous ") + what +
                        " (no silent copies: convert it first, e.g. numpy.ascontiguousarray)");
  }
}

// check_layout, then one of the allowed ndims and every extent at most limits::kMaxElements
// (only a zero-size array can be larger); throws TypeMismatch / InvalidArgument naming `arg`.
template <class T, class Array>
void check(const Array& a, const char* arg, std::initializer_list<size_t> ndims) {
  check_layout<T>(a, arg);
  bool ndim_ok = false;
  for (size_t n : ndims) ndim_ok |= a.ndim() == n;
  if (!ndim_ok) {
    std::string allowed;
    for (size_t n : ndims) allowed += (allowed.empty() ? "" : " or ") + std::to_string(n);
    throw_arg(arg, "expected " + allowed + " dimensions, got " + describe_array(a));
  }
  for (size_t i = 0; i < a.ndim(); ++i)
    if (int64_t(a.shape(i)) > limits::kMaxElements)
      throw_arg(arg, "expected dimensions of at most " + std::to_string(limits::kMaxElements) +
                         ", got " + describe_array(a));
}

template <class T>
const T* in_ptr(const InArray& a, const char* arg, std::initializer_list<size_t> ndims) {
  check<T>(a, arg, ndims);
  return static_cast<const T*>(a.data());
}

// Shape must match exactly.
template <class Array>
void check_shape(const Array& a, const char* arg, const std::vector<int64_t>& shape) {
  if (array_shape(a) != shape)
    throw_arg(arg, "expected shape " + shape_str(shape.size(), shape.data()) + ", got " +
                       describe_array(a));
}

// The array an op writes, known before anything is written. out= given: dtype T, C-contiguous
// and exactly `shape`, or it is refused naming `arg` (every binding that writes takes its
// output through here: the memory-safety boundary). None: a new numpy array of `shape`
// (ValueError naming `new_arg`, the argument the shape comes from, past kMaxElements), which
// `array` holds for the binding to return (None when out= was given).
template <class T>
struct Output {
  T* data = nullptr;
  nb::object array;
};

template <class T>
Output<T> output(const std::optional<OutArray>& out, const char* arg,
                 const std::vector<int64_t>& shape, const char* new_arg) {
  if (out) {
    check_layout<T>(*out, arg);
    check_shape(*out, arg, shape);
    return {static_cast<T*>(out->data()), nb::none()};
  }
  int64_t n = 1;
  bool fits = true;
  for (int64_t s : shape) {
    fits = fits && s >= 0 && s <= limits::kMaxElements &&
           (s == 0 || n <= limits::kMaxElements / s);
    n = fits ? n * s : 0;
  }
  if (!fits)
    throw_arg(new_arg, "expected a result of at most " + std::to_string(limits::kMaxElements) +
                           " elements, got shape " + shape_str(shape.size(), shape.data()));
  T* p = new T[size_t(n ? n : 1)];
  nb::capsule own(p, [](void* q) noexcept { delete[] static_cast<T*>(q); });
  const std::vector<size_t> dims(shape.begin(), shape.end());
  return {p, nb::ndarray<nb::numpy, T>(p, dims.size(), dims.data(), own).cast()};
}

// The result shape of a layer applied to x (k,) or (batch, k): (m,) or (batch, m).
template <class Array>
std::vector<int64_t> rows_by(const Array& x, int64_t m) {
  if (x.ndim() == 1) return {m};
  return {int64_t(x.shape(0)), m};
}

// A size argument (k, m, stages): lo <= v <= limits::kMaxElements, the largest extent any
// buffer may have, so that all index arithmetic stays far from int64 overflow.
inline void check_extent(int64_t v, const char* arg, int64_t lo) {
  if (v < lo || v > limits::kMaxElements)
    throw_arg(arg, "expected an integer in [" + std::to_string(lo) + ", " +
                       std::to_string(limits::kMaxElements) + "], got " + std::to_string(v));
}

// threads= is not checked here: each op resolves it with limits::resolve_threads (0 = the
// default, 1..kMaxThreads), before any output is written.

nb::list variants_to_list(const std::vector<VariantInfo>& infos);

void bind_common(nb::module_& m);
void bind_packed_weights(nb::module_& m);
void bind_ternary(nb::module_& m);
void bind_widely_linear(nb::module_& m);
void bind_moe(nb::module_& m);
void bind_attention(nb::module_& m);

}  // namespace cpukern::ext
