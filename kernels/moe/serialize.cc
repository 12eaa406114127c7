// The serialised form of moe::PackedExperts (moe.h, kernels/common/prepared_blob.h).
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

constexpr blob::OpFormat kOp{"moe", 3, 1};

}  // namespace

int64_t serialized_size(const PackedExperts& w) {
  const int64_t size = w.nbytes();
  return int64_t(blob::plan(&size, 1).total);
}

void serialize(const PackedExperts& w, unsigned char* out, int64_t size) {
  const int64_t bytes = w.nbytes();
  const blob::LayoutPlan plan = blob::plan(&bytes, 1);
  check_arg(size == int64_t(plan.total), "out",
            "expected " + std::to_string(plan.total) + " bytes (serialized_size), got " +
                std::to_string(size));
  check_disjoint(out, size, "out",
                 {{w.buffer.p, w.buffer.size, "experts"}, {w.data.data(), bytes, "experts"}});
  const int64_t dims[3] = {w.e, w.o, w.i};
  const blob::Header h = blob::make_header(kOp.op, w.isa, w.ukernel->name, w.ukernel->layout,
                                           format_name(w.format), dims, 3, plan);
  std::memset(out, 0, size_t(plan.total));
  std::memcpy(out + plan.section[0].offset, w.data.data(), size_t(bytes));
  blob::finish(h, out);
}

std::shared_ptr<const PackedExperts> from_buffer(const unsigned char* buf, int64_t size,
                                                 std::shared_ptr<const void> owner,
                                                 const ImportOptions& opts) {
  const std::string& arg = opts.arg;
  const std::string& isa = opts.isa;
  const blob::Header h = blob::parse(buf, size, kOp, arg);
  if (opts.verify) blob::verify_checksum(h, buf, arg);  // first: a changed header says so
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
  const std::string variant = blob::name(h.variant), ukernel = blob::name(h.ukernel),
                    layout = blob::name(h.layout);
  const Variant* row = nullptr;
  auto consider = [&](const Variant& r) {
    // The layout word too: a micro-kernel whose byte order changed carries a new one, so a
    // buffer of the old order is refused instead of misread.
    const Ukernel& u = ukernel_for(r, format);
    if (!row && variant == r.name && ukernel == u.name && layout == u.layout && r.supported())
      row = &r;
  };
  for (const Variant& r : registry().variants()) consider(r);
  if (opts.extra_rows)
    for (const Variant& r : *opts.extra_rows) consider(r);
  check_arg(row != nullptr && (isa.empty() || isa == variant), arg,
            "prepared for variant '" + variant + "' (" + ukernel + ")" +
                (row ? ", not the variant asked for ('" + isa + "')" : ", which this CPU cannot run") +
                "; MoE packings cannot be unpacked: prepack the experts again from their weights");
  const Ukernel& uk = ukernel_for(*row, format);
  const int64_t bytes = checked_mul(uk.packed_size(o, i), e, arg.c_str());
  const unsigned char* data = blob::section(h, buf, 0, bytes, arg, "packed experts");
  if (opts.reprepared) *opts.reprepared = false;
  auto* p = new PackedExperts;
  p->variant = row;
  p->ukernel = &uk;
  p->isa = row->name;
  p->format = format;
  p->e = e;
  p->o = o;
  p->i = i;
  p->data = AlignedBuffer::borrow(data, size_t(bytes));  // zero-copy; the buffer is `owner`'s
  p->buffer = {buf, size};
  return std::shared_ptr<const PackedExperts>(p, [owner](const PackedExperts* q) { delete q; });
}

}  // namespace cpukern::moe
