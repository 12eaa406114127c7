// Bindings of cpukern::PackedWeights (kernels/common/packed_weights.h): the one Python class of
// packed weights of every op, its serialised form, and the import of any op's buffer.
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/packed_weights.h"
#include "kernels/common/weight_memory.h"
#include "kernels/moe/moe.h"
#include "kernels/ternary/ternary.h"
#include "kernels/widely_linear/widely_linear.h"
#include "python/ext/arrays.h"
#include "python/ext/gil.h"
#include "python/ext/prepared.h"

namespace cpukern::ext {

namespace {

nb::tuple shape_of(const PackedWeights& w) {
  nb::list dims;
  for (int64_t d : w.shape()) dims.append(d);
  return nb::tuple(dims);
}

// An attribute only one op's weights have: AttributeError for the others (so hasattr works).
template <class T>
const T& only(const PackedWeights& w, const char* attr) {
  if (const auto* p = dynamic_cast<const T*>(&w)) return *p;
  throw nb::attribute_error((std::string(attr) + ": " + w.op + " weights have no such attribute")
                                .c_str());
}

std::string repr(const PackedWeights& w) {
  std::string dims;
  for (int64_t d : w.shape()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  if (w.shape().size() == 1) dims += ",";
  return "PackedWeights(op='" + w.op + "', format='" + w.weight_format + "', act='" + w.act +
         "', variant='" + w.isa + "', shape=(" + dims + "), nbytes=" +
         std::to_string(w.nbytes()) + ")";
}

// The op a prepared buffer's header names, if it is one of `ops` (any op when `ops` is empty);
// else ops[0] (or "", when `ops` is empty), whose import then says what is wrong with it.
std::string op_of(const unsigned char* p, int64_t size, const std::vector<std::string>& ops) {
  const std::string fallback = ops.empty() ? "" : ops[0];
  if (size < int64_t(sizeof(blob::Header)) || std::memcmp(p, blob::kMagic, sizeof blob::kMagic))
    return fallback;
  const auto* h = reinterpret_cast<const blob::Header*>(p);
  const std::string op(h->op, strnlen(h->op, sizeof h->op));
  return ops.empty() || std::find(ops.begin(), ops.end(), op) != ops.end() ? op : fallback;
}

}  // namespace

void bind_packed_weights(nb::module_& m) {
  nb::class_<PackedWeights>(
      m, "PackedWeights",
      "Weights packed once into one micro-kernel's layout, for any op (cpukern.ternary.prepare, "
      "cpukern.widely_linear.prepare, cpukern.moe.prepare). Pickles, copies and serialises "
      "(to_bytes, from_buffer).")
      .def_ro("op", &PackedWeights::op, "The op: 'ternary', 'widely_linear' or 'moe'.")
      .def_ro("format", &PackedWeights::weight_format,
              "The stored weights' format: 'ternary', or for moe 'bf16', 'mxfp4', 'int8' or "
              "'mxfp4_a8' (MXFP4 weights, int8 activations).")
      .def_ro("act", &PackedWeights::act,
              "The activations the micro-kernel reads: 'fp32', 'bf16' or 'int8' (ternary weights "
              "also run act='int8' through their int8 layout).")
      .def_ro("variant", &PackedWeights::isa, "The variant (registry row) that packed them.")
      .def_ro("ukernel", &PackedWeights::ukernel_name, "The variant's micro-kernel.")
      .def_ro("layout", &PackedWeights::layout_name, "The layout word of the kernel layout.")
      .def_prop_ro("shape", &shape_of, nb::for_getter(nb::sig("def shape(self) -> tuple[int, ...]")),
                   "ternary (M, K); widely_linear (2n, 2m), the real matrix the layer stands for; "
                   "moe (E, O, I) of the unpacked weights.")
      .def_prop_ro("nbytes", &PackedWeights::nbytes,
                   "Bytes of the kernel layouts held now (scales not counted).")
      .def_prop_ro("is_view", &PackedWeights::is_view,
                   "True when the layouts view a serialised buffer (from_buffer, zero-copy).")
      .def_prop_ro("has_scale", [](const PackedWeights& w) { return w.scales() != nullptr; },
                   "True when the weights carry float32 scales of their own.")
      .def_prop_ro(
          "group_size",
          [](const PackedWeights& w) {
            return only<ternary::PreparedWeights>(w, "group_size").group_size;
          },
          "ternary weights: G when the scale is per row and group of G columns, else 0 "
          "(AttributeError for other ops).")
      .def_prop_ro(
          "int8_ready",
          [](const PackedWeights& w) {
            return only<ternary::PreparedWeights>(w, "int8_ready").i8_ready();
          },
          "ternary weights: True when act='int8' needs no packing (the int8 layout exists).")
      .def_prop_ro(
          "stages",
          [](const PackedWeights& w) {
            return only<widely_linear::PreparedLayer>(w, "stages").stages;
          },
          "widely_linear weights: the number of phase-quantised stages.")
      // to_bytes, from_buffer and __reduce__ (pickling) are set by cpukern, in Python: a binding
      // that calls back into Python could be ended there by interpreter exit (gil.h).
      .def("__repr__", &repr);

  // Uninitialised bytes for packed weights (WeightMemory: huge pages for every size from 64
  // KiB), as a 1-D uint8 numpy array that frees them (cpukern._packed.aligned_empty).
  m.def(
      "weight_memory",
      [](int64_t nbytes) {
        check_arg(nbytes >= 0 && nbytes <= limits::kMaxElements, "nbytes",
                  "expected 0 to " + std::to_string(limits::kMaxElements) + ", got " +
                      std::to_string(nbytes));
        void* p = WeightMemory::allocate(size_t(nbytes));
        nb::capsule own(p, [](void* q) noexcept { WeightMemory::release(q); });
        const size_t dims[1] = {size_t(nbytes)};
        return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(p, 1, dims, own);
      },
      nb::arg("nbytes"));
  m.def("weight_memory_stats", [] {
    const WeightMemory::Stats s = WeightMemory::stats();
    return std::make_tuple(s.chunks, s.chunk_bytes, s.live);
  });
  // A call's variant= on these weights (PackedWeights::check_variant): "" or their own variant.
  m.def(
      "packed_serialized_size",
      [](const PackedWeights& w, bool int8) { return w.serialized_size({int8, 0}); },
      nb::arg("weights"), nb::arg("int8"));
  m.def(
      "packed_serialize",
      [](const PackedWeights& w, bool int8, int threads, const OutArray& out) {
        const PackedWeights::SerializeOptions o{int8, threads};
        const int64_t size = w.serialized_size(o);
        unsigned char* p = out_bytes(out, "out", size);
        GilRelease release;
        w.serialize(p, size, o);
      },
      nb::arg("weights"), nb::arg("int8"), nb::arg("threads"), nb::arg("out"));
  // The packed weights of a buffer whose header names one of `ops` (empty: any op); one that
  // names another op is refused by ops[0]'s import, naming `arg`.
  m.def(
      "packed_from_buffer",
      [](const InArray& buf, const std::vector<std::string>& ops, bool verify,
         const std::string& variant, int threads, const char* arg) {
        return import_buffer(buf, arg, [&](const unsigned char* p, int64_t size, auto owner)
                                           -> std::shared_ptr<const PackedWeights> {
          const std::string op = op_of(p, size, ops);
          if (op == moe::kBlobFormat.op)
            return moe::from_buffer(
                p, size, owner,
                blob::import_options<moe::ImportOptions>(verify, variant, arg, threads));
          if (op == widely_linear::kBlobFormat.op)
            return widely_linear::from_buffer(
                p, size, owner,
                blob::import_options<widely_linear::ImportOptions>(verify, variant, arg, threads));
          return ternary::from_buffer(
              p, size, owner,
              blob::import_options<ternary::ImportOptions>(verify, variant, arg, threads));
        });
      },
      nb::arg("buffer"), nb::arg("ops"), nb::arg("verify"), nb::arg("variant"), nb::arg("threads"),
      nb::arg("arg"));
}

}  // namespace cpukern::ext
