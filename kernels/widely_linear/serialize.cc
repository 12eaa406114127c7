// The serialised form of PreparedLayer (widely_linear.h, kernels/common/prepared_blob.h).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/common/ternary_codes.h"
#include "kernels/widely_linear/ukernel.h"

namespace cpukern::widely_linear {
namespace {

constexpr blob::OpFormat kOp{"widely_linear", 3, 2};
enum Dim { kStages, kN, kM };
enum Sec { kLayout, kScales };

std::string s(int64_t v) { return std::to_string(v); }

const Layout* layout_named(const std::string& name) {
  for (const Layout* l : {&layouts::t2p16x4, &layouts::g3r8x4, &layouts::g4r16x4})
    if (name == l->name) return l;
  return nullptr;
}

}  // namespace

int64_t serialized_size(const PreparedLayer& layer) {
  const int64_t sizes[2] = {layer.nbytes(), 4 * layer.stages * 4 * layer.n};
  return int64_t(blob::plan(sizes, 2).total);
}

void serialize(const PreparedLayer& layer, unsigned char* out, int64_t size) {
  const int64_t sizes[2] = {layer.nbytes(), 4 * layer.stages * 4 * layer.n};
  const blob::LayoutPlan plan = blob::plan(sizes, 2);
  check_arg(size == int64_t(plan.total), "out",
            "expected " + s(int64_t(plan.total)) + " bytes (serialized_size), got " + s(size));
  check_disjoint(out, size, "out",
                 {{layer.buffer.p, layer.buffer.size, "layer"},
                  {layer.layout(), layer.nbytes(), "layer"},
                  {layer.scale_data(), sizes[1], "layer"}});
  const int64_t dims[3] = {layer.stages, layer.n, layer.m};
  const Ukernel& uk = layer.variant->ukernel;
  const blob::Header h =
      blob::make_header(kOp.op, layer.isa, uk.name, uk.layout->name, "", dims, 3, plan);
  std::memset(out, 0, size_t(plan.total));
  std::memcpy(out + plan.section[kLayout].offset, layer.layout(), size_t(sizes[kLayout]));
  std::memcpy(out + plan.section[kScales].offset, layer.scale_data(), size_t(sizes[kScales]));
  blob::finish(h, out);
}

std::shared_ptr<const PreparedLayer> from_buffer(const unsigned char* buf, int64_t size,
                                                 std::shared_ptr<const void> owner,
                                                 const ImportOptions& opts) {
  const std::string& arg = opts.arg;
  const blob::Header h = blob::parse_import(buf, size, kOp, opts);
  const int64_t stages = h.dims[kStages], n = h.dims[kN], m = h.dims[kM];
  const bool dims_ok = stages >= 1 && n >= 1 && m >= 1 && stages <= limits::kMaxElements &&
                       n <= limits::kMaxElements && m <= limits::kMaxElements;
  check_arg(dims_ok, arg,
            "corrupted header (stages " + s(stages) + ", n " + s(n) + ", m " + s(m) + ")");
  checked_mul(checked_mul(stages * 4, n, arg.c_str()), ternary_codes::words_for(m) * 16, arg.c_str());
  check_arg(blob::name(h.format).empty(), arg, "corrupted header (format '" + blob::name(h.format) + "')");
  const Dims d{stages, n, m, ternary_codes::words_for(m)};

  const std::string variant = blob::name(h.variant), layout = blob::name(h.layout);
  const auto [made_by, want] = blob::import_rows(
      h, registry(), opts.extra_rows, opts.isa,
      [](const Variant& r, const std::string& uk, const std::string& lo) {
        return uk == r.ukernel.name && lo == r.ukernel.layout->name;
      });
  const int64_t scale_bytes = 4 * stages * 4 * n;

  if (want == made_by) {
    const Variant& v = *made_by;
    auto layer = std::make_shared<PreparedLayer>();
    layer->variant = &v;
    layer->isa = v.name;
    layer->packer = packer_for(*v.ukernel.layout).name;
    layer->stages = stages;
    layer->n = n;
    layer->m = m;
    const int64_t bytes = int64_t(v.ukernel.layout->packed_size(d));
    layer->layout_view = blob::section(h, buf, kLayout, bytes, arg, "layout");
    layer->layout_view_bytes = bytes;
    layer->scales_view =
        reinterpret_cast<const float*>(blob::section(h, buf, kScales, scale_bytes, arg, "scales"));
    return blob::view_of(std::move(layer), std::move(owner), buf, size, opts);
  }
  blob::check_reprepare_allowed(opts.allow_reprepare, arg, variant, layout, made_by != nullptr,
                                "import it once with from_buffer");
  const Layout* from = layout_named(layout);
  check_arg(from == &layouts::t2p16x4, arg,
            "prepared for variant '" + variant + "' (layout '" + layout + "')" +
                (made_by ? ", not the variant asked for," : ", which this CPU cannot run,") +
                " and that layout cannot be unpacked (only the public layout t2p16x4 can); "
                "prepare it again from the planes");
  const auto* planes = reinterpret_cast<const uint32_t*>(
      blob::section(h, buf, kLayout, int64_t(from->packed_size(d)), arg, "layout"));
  const auto* scales =
      reinterpret_cast<const float*>(blob::section(h, buf, kScales, scale_bytes, arg, "scales"));
  if (opts.reprepared) *opts.reprepared = true;
  try {
    return prepare_with(*want, planes, scales, true, stages, n, d.words, m);
  } catch (const InvalidArgument& e) {
    throw_arg(arg, std::string("the prepared layout holds invalid weights (") + e.what() + ")");
  }
}

}  // namespace cpukern::widely_linear
