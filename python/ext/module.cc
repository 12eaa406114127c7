// cpukern._ext: the nanobind extension. Each op binds in its own file; arrays travel
// without copies and every kernel runs with the GIL released.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <new>

#include "kernels/common/bandwidth.h"
#include "kernels/common/cpu_features.h"
#include "kernels/common/limits.h"
#include "kernels/common/registry.h"
#include "kernels/common/scratch.h"
#include "kernels/common/thread_pool.h"
#include "python/ext/arrays.h"
#include "python/ext/gil.h"

namespace cpukern::ext {

std::string describe(const nb::dlpack::dtype& dt) {
  using C = nb::dlpack::dtype_code;
  std::string kind;
  switch (C(dt.code)) {
    case C::Int: kind = "int"; break;
    case C::UInt: kind = "uint"; break;
    case C::Float: kind = "float"; break;
    case C::Bfloat: kind = "bfloat"; break;
    case C::Complex: kind = "complex"; break;
    case C::Bool: return "bool";
    default: kind = "unknown"; break;
  }
  return kind + std::to_string(dt.bits);
}

std::string shape_str(size_t ndim, const int64_t* shape) {
  std::string s = "(";
  for (size_t i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (ndim == 1 ? ",)" : ")");
}

namespace {

nb::dict cpu_info_dict() {
  const CpuInfo& info = cpu_info();
  nb::dict d;
  d["arch"] = arch_name(info.arch);
  d["vendor"] = info.vendor;
  d["features"] = feature_names(info.features);
  d["num_cores"] = info.num_cores;
  d["l2_bytes"] = info.l2_bytes;
  d["l3_bytes"] = info.l3_bytes;
  return d;
}

}  // namespace

nb::list variants_to_list(const std::vector<VariantInfo>& infos) {
  nb::list out;
  for (const auto& v : infos) {
    nb::dict d;
    d["name"] = v.name;
    d["ukernel"] = v.ukernel;
    d["requires"] = v.required;
    d["missing"] = v.missing;
    d["why"] = v.why;
    if (v.tiles_min_rows) d["tiles_min_rows"] = v.tiles_min_rows;
    d["priority"] = v.priority;
    d["supported"] = v.supported;
    d["selected"] = v.selected;
    out.append(d);
  }
  return out;
}

void bind_common(nb::module_& m) {
  m.def("cpu_info", &cpu_info_dict, "Architecture and detected CPU features.");
  // The one limits table (kernels/common/limits.h); the Python layer reads it from here.
  nb::dict lim;
  lim["max_elements"] = limits::kMaxElements;
  lim["max_threads"] = limits::kMaxThreads;
  lim["max_pool_threads"] = limits::kMaxPoolThreads;
  m.attr("limits") = lim;
  static const std::string set_doc =
      "Default thread count for ops called with threads=None: 0 (all cores) or 1.." +
      std::to_string(limits::kMaxThreads) + "; the pool runs at most " +
      std::to_string(limits::kMaxPoolThreads) + " threads.";
  m.def(
      "set_num_threads",
      [](int n) {
        limits::resolve_threads(n, "n");
        set_num_threads(n);
      },
      nb::arg("n"), set_doc.c_str());
  m.def("get_num_threads", &get_num_threads);
  m.def("set_polling", &set_polling, nb::arg("on"),
        "Pool threads poll for the next call before sleeping (on, the default) or sleep at once;\n"
        "returns the previous setting.");
  m.def(
      "empty_cache", [] { empty_cache(); },
      "Gives back the scratch memory kernels keep between calls (every thread's that no call\n"
      "is using now; a call in flight gives its own back when it returns).");
  m.def(
      "read_bandwidth",
      [](int64_t nbytes, int threads, double min_seconds) {
        ext::GilRelease release;
        return measure_read_bandwidth(nbytes, threads, min_seconds);
      },
      nb::arg("nbytes") = int64_t(1) << 30, nb::arg("threads") = 0, nb::arg("min_seconds") = 0.5,
      "Bytes/s of a streaming read of nbytes (far above the L3: DRAM) with `threads` threads of\n"
      "the kernels' pool (0 = the default): the floor that decode kernels are bound by.");
}

}  // namespace cpukern::ext

NB_MODULE(_ext, m) {
  // Objects still referenced by daemon threads at interpreter exit are not leaks to report.
  nanobind::set_leak_warnings(false);
  using namespace cpukern;
  namespace nb = nanobind;
  // cpukern._ext.LayoutNotRunnableError, a ValueError: prepared weights this CPU cannot run
  // that cannot be unpacked (the torch layer packs again from the plain weights on it).
  static PyObject* layout_not_runnable = PyErr_NewException(
      "cpukern._ext.LayoutNotRunnableError", PyExc_ValueError, nullptr);
  m.attr("LayoutNotRunnableError") = nb::borrow(layout_not_runnable);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const LayoutNotRunnable& e) {
      PyErr_SetString(layout_not_runnable, e.what());
    } catch (const TypeMismatch& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const InvalidArgument& e) {
      // The remedy in this API's words (kernels/ names no Python API).
      const char* how = e.remedy == Remedy::kAlignBuffer
                            ? " (cpukern.ternary.aligned_empty, or a new torch tensor)"
                        : e.remedy == Remedy::kExportAgain ? " (to_bytes / state_dict)"
                                                           : "";
      PyErr_SetString(PyExc_ValueError, (std::string(e.what()) + how).c_str());
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "cpukern: out of memory");
    } catch (const Interrupted&) {
      // Ctrl-C stopped the call (gil.h): Python's SIGINT handler raises KeyboardInterrupt.
      if (PyErr_CheckSignals() == 0) PyErr_SetNone(PyExc_KeyboardInterrupt);
    }
  });
  ext::bind_common(m);
  ext::bind_packed_weights(m);
  ext::bind_ternary(m);
  ext::bind_widely_linear(m);
  ext::bind_moe(m);
  ext::bind_attention(m);
}
