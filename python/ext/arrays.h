// Zero-copy array views for the extension: every check names the argument and uses the
// same wording ("x: expected a C-contiguous float32 CPU array, got ...").
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
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

// Checks dtype T (bf16 travels as its 16-bit pattern), C-contiguity and one of the
// allowed ndims; throws TypeMismatch / InvalidArgument naming `arg`.
template <class T, class Array>
void check(const Array& a, const char* arg, std::initializer_list<size_t> ndims) {
  const nb::dlpack::dtype want = nb::dtype<T>();
  const auto got = a.dtype();
  const bool bf16_bits = std::is_same_v<T, uint16_t> &&
                         ((got.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && got.bits == 16) ||
                          (got.bits == 16 && got.code != uint8_t(nb::dlpack::dtype_code::Float)));
  const bool dtype_ok = bf16_bits || (got.code == want.code && got.bits == want.bits && got.lanes == 1);
  bool ndim_ok = false;
  for (size_t n : ndims) ndim_ok |= a.ndim() == n;
  if (!dtype_ok || !c_contiguous(a)) {
    throw_type(arg, std::string("expected a C-contiguous ") + dtype_name<T>() + " CPU array, got " +
                        (c_contiguous(a) ? "" : "a non-contiguous ") + describe_array(a) +
                        " (no silent copies: convert it first, e.g. numpy.ascontiguousarray)");
  }
  if (!ndim_ok) {
    std::string allowed;
    for (size_t n : ndims) allowed += (allowed.empty() ? "" : " or ") + std::to_string(n);
    throw_arg(arg, "expected " + allowed + " dimensions, got " + describe_array(a));
  }
}

template <class T>
const T* in_ptr(const InArray& a, const char* arg, std::initializer_list<size_t> ndims) {
  check<T>(a, arg, ndims);
  return static_cast<const T*>(a.data());
}

template <class T>
T* out_ptr(const OutArray& a, const char* arg, std::initializer_list<size_t> ndims) {
  check<T>(a, arg, ndims);
  return static_cast<T*>(a.data());
}

// Output shape must match exactly.
template <class Array>
void check_shape(const Array& a, const char* arg, std::initializer_list<int64_t> shape) {
  bool ok = a.ndim() == shape.size();
  size_t i = 0;
  for (int64_t s : shape) ok = ok && int64_t(a.shape(i++)) == s;
  if (!ok)
    throw_arg(arg, "expected shape " + shape_str(shape.size(), shape.begin()) + ", got " +
                       describe_array(a));
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

}  // namespace cpukern::ext
