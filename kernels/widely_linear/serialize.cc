// The serialised form of PreparedLayer (widely_linear.h, kernels/common/packed_weights.h): its
// dims, the checks of a buffer's dims and section sizes, re-preparation of the public layout.
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

constexpr const blob::OpFormat& kOp = kBlobFormat;
enum Dim { kStages, kN, kM };

std::string s(int64_t v) { return std::to_string(v); }

const Layout* layout_named(const std::string& name) {
  for (const Layout* l : {&layouts::t2p16x4, &layouts::g3r8x4, &layouts::g4r16x4})
    if (name == l->name) return l;
  return nullptr;
}

}  // namespace

void section_sizes(const Variant& v, const Dims& d, int64_t sizes[2]) {
  sizes[PreparedLayer::kLayout] = int64_t(v.ukernel.layout->packed_size(d));
  sizes[PreparedLayer::kScales] = 4 * d.stages * 4 * d.n;
}

PackedWeights::BlobContents PreparedLayer::blob_contents(const SerializeOptions&, bool) const {
  BlobContents c = held_sections();
  c.dims[kStages] = stages;
  c.dims[kN] = n;
  c.dims[kM] = m;
  return c;
}

int64_t serialized_size(const PreparedLayer& layer) { return layer.serialized_size(); }

void serialize(const PreparedLayer& layer, unsigned char* out, int64_t size) {
  layer.serialize(out, size);
}

std::shared_ptr<const PreparedLayer> from_buffer(
    const unsigned char* buf, int64_t size, std::shared_ptr<const void> owner,
    const ImportOptions& opts, const Registry<Ukernel>& rows) {
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

  // Plain variables, not a structured binding: lambdas below capture them (C++17).
  const auto found = blob::import_rows(
      h, rows, opts.isa, [](const Variant& r, const std::string& uk, const std::string& lo) {
        return uk == r.ukernel.name && lo == r.ukernel.layout->name;
      });
  const Variant* const made_by = found.first;
  const Variant* const want = found.second;
  const int64_t scale_bytes = 4 * stages * 4 * n;

  if (want == made_by) {
    const Variant& v = *made_by;
    auto layer = std::make_shared<PreparedLayer>();
    layer->variant = &v;
    layer->packer = packer_for(*v.ukernel.layout).name;
    layer->stages = stages;
    layer->n = n;
    layer->m = m;
    int64_t expected[2];
    section_sizes(v, d, expected);
    const char* const what[2] = {"layout", "scales"};
    layer->view_blob(h, buf, size, std::move(owner), expected, what, arg);
    return layer;
  }
  // Only the public layout can be unpacked: its planes are prepare's input.
  const Layout* from = layout_named(blob::name(h.layout));
  blob::check_can_prepare_again(h, arg, opts.allow_reprepare, made_by != nullptr,
                                from == &layouts::t2p16x4,
                                "only the public layout t2p16x4 can be: prepare it again from "
                                "the planes");
  const auto* planes = reinterpret_cast<const uint32_t*>(
      blob::section(h, buf, PreparedLayer::kLayout, int64_t(from->packed_size(d)), arg, "layout"));
  const auto* scales =
      reinterpret_cast<const float*>(blob::section(h, buf, PreparedLayer::kScales, scale_bytes, arg, "scales"));
  return blob::prepare_again(
      arg, [&] { return prepare_with(*want, planes, scales, true, stages, n, d.words, m); });
}

std::shared_ptr<const PreparedLayer> from_buffer(const unsigned char* buf, int64_t size,
                                                 std::shared_ptr<const void> owner,
                                                 const ImportOptions& opts) {
  return from_buffer(buf, size, std::move(owner), opts, registry());
}

}  // namespace cpukern::widely_linear
