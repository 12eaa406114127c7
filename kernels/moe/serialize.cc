// The serialised form of moe::PackedExperts (moe.h, kernels/common/packed_weights.h): its dims
// and format word, the checks of a buffer's dims and section size.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/moe/int8.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {
namespace {

constexpr const blob::OpFormat& kOp = kBlobFormat;

}  // namespace

PackedWeights::BlobContents PackedExperts::blob_contents(const SerializeOptions&, bool) const {
  BlobContents c = held_sections();
  c.dims[0] = e;
  c.dims[1] = o;
  c.dims[2] = i;
  c.format = weight_format;
  return c;
}

int64_t serialized_size(const PackedExperts& w) { return w.serialized_size(); }

void serialize(const PackedExperts& w, unsigned char* out, int64_t size) { w.serialize(out, size); }

std::shared_ptr<const PackedExperts> from_buffer(
    const unsigned char* buf, int64_t size, std::shared_ptr<const void> owner,
    const ImportOptions& opts, const Registry<GemmConfig>& rows) {
  const std::string& arg = opts.arg;
  const blob::Header h = blob::parse_import(buf, size, kOp, opts);
  const int64_t e = h.dims[0], o = h.dims[1], i = h.dims[2];
  check_arg(e >= 1 && o >= 1 && i >= 1 && e <= limits::kMaxElements && o <= limits::kMaxElements &&
                i <= limits::kMaxElements,
            arg, "corrupted header (shape " + std::to_string(e) + " x " + std::to_string(o) + " x " +
                     std::to_string(i) + ")");
  checked_mul(checked_mul(e, o, arg.c_str()), i, arg.c_str());
  WeightFormat format;
  try {
    format = parse_format(blob::name(h.format));
  } catch (const InvalidArgument&) {
    throw_arg(arg, "corrupted header (format '" + blob::name(h.format) + "')");
  }
  check_arg((format != WeightFormat::kMxfp4 && format != WeightFormat::kMxfp4A8) || i % 32 == 0,
            arg, "corrupted header (MXFP4 I)");
  check_arg(format != WeightFormat::kInt8 || i <= int8::kMaxK, arg, "corrupted header (int8 I)");
  // The layout word too: a micro-kernel whose byte order changed carries a new one, so a
  // buffer of the old order is refused instead of misread. MoE packings are never unpacked:
  // only the row that made it is looked up, and it must be the one opts.isa asks for.
  const Variant* row = blob::import_rows(
      h, rows, "",
      [format](const Variant& r, const std::string& uk, const std::string& lo) {
        const Ukernel& u = ukernel_for(r, format);
        return uk == u.name && lo == u.layout;
      }).first;
  if (!row || (!opts.isa.empty() && opts.isa != blob::name(h.variant)))
    blob::check_can_prepare_again(h, arg, true, row != nullptr, false,
                                  "MoE packings never can: prepare the experts again from their "
                                  "weights");
  auto p = std::make_shared<PackedExperts>();
  p->identify(*row, format, e, o, i);
  const int64_t bytes = packed_bytes(*p->ukernel, e, o, i, arg.c_str());
  const char* const what[1] = {"packed experts"};
  p->view_blob(h, buf, size, std::move(owner), &bytes, what, arg);
  return p;
}

std::shared_ptr<const PackedExperts> from_buffer(const unsigned char* buf, int64_t size,
                                                 std::shared_ptr<const void> owner,
                                                 const ImportOptions& opts) {
  return from_buffer(buf, size, std::move(owner), opts, registry());
}

}  // namespace cpukern::moe
