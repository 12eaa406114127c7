// Shared by the bindings of the serialised prepared weights (ternary, widely_linear, moe): the
// caller's uint8 buffer as bytes, and a reference that keeps it alive from C++.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "kernels/common/packed_weights.h"

#include "python/ext/arrays.h"
#include "python/ext/gil.h"

namespace cpukern::ext {

template <> inline const char* dtype_name<uint8_t>() { return "uint8"; }

// A 1-D C-contiguous uint8 buffer: (bytes, size); throws naming `arg`.
inline std::pair<const unsigned char*, int64_t> buffer_bytes(const InArray& a, const char* arg) {
  const auto* p = in_ptr<uint8_t>(a, arg, {1});
  return {p, int64_t(a.shape(0))};
}

// Holds the ndarray (and so the Python object or DLPack capsule that owns the memory) for as
// long as a C++ view of it lives; released with the GIL (with_gil: a thread that is exiting
// with the interpreter is parked there, not unwound through this noexcept deleter).
template <class Array>
std::shared_ptr<const void> keep_alive(const Array& a) {
  return std::shared_ptr<const void>(new Array(a), [](const void* p) {
    with_gil([p] { delete static_cast<const Array*>(p); });
  });
}

// A uint8 output buffer of exactly `size` bytes, 64-byte aligned; throws naming `arg`.
inline unsigned char* out_bytes(const OutArray& a, const char* arg, int64_t size) {
  check_layout<uint8_t>(a, arg);
  check_shape(a, arg, {size});
  auto* p = static_cast<unsigned char*>(a.data());
  check_arg(reinterpret_cast<uintptr_t>(p) % 64 == 0, arg, "must start on a 64-byte boundary");
  return p;
}

// Packs straight into `out` (a prepare binding's out=, cpukern._packed.prepare_into): checked
// as a uint8 buffer of exactly `size` bytes, 64-byte aligned (naming "out"), then
// prepare(target) runs with the GIL released (work as GilRelease takes it); the weights it
// returns view `out` and keep it alive.
template <class Prepare>
std::shared_ptr<const PackedWeights> prepare_into(const OutArray& out, int64_t size, double work,
                                                  Prepare&& prepare) {
  BlobTarget target{out_bytes(out, "out", size), size, keep_alive(out)};
  std::shared_ptr<const PackedWeights> w;
  {
    GilRelease release(work);
    w = prepare(target);
  }
  target.owner.reset();  // with the GIL held (the weights keep their own reference)
  return w;
}

// Imports a serialised buffer: import(bytes, size, owner) runs with the GIL released and
// returns a view that keeps `buf` alive through owner.
template <class Import>
auto import_buffer(const InArray& buf, const char* arg, Import&& import) {
  const auto [p, size] = buffer_bytes(buf, arg);
  auto owner = keep_alive(buf);
  decltype(import(p, size, owner)) view;
  {
    GilRelease release;
    view = import(p, size, owner);
  }
  owner.reset();  // with the GIL held (the view keeps its own reference)
  return view;
}

// The packed weights of one op (T, the op's type, `expected` its Python name for the message);
// TypeError (TypeMismatch) naming `arg` for another op's.
template <class T>
const T& weights_of(const PackedWeights& w, const char* arg, const char* expected) {
  if (const auto* p = dynamic_cast<const T*>(&w)) return *p;
  throw_type(arg, std::string("expected ") + expected + ", got packed weights of op '" + w.op + "'");
}

}  // namespace cpukern::ext
