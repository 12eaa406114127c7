#include "kernels/common/packed_weights.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/common/errors.h"

namespace cpukern {

PackedWeights::PackedWeights(const blob::OpFormat& fmt, int scale_section, const char* arg_name)
    : blob_format(fmt), op(fmt.op), scale_section_(scale_section), arg_name_(arg_name) {}

void* PackedWeights::own_section(int i, int64_t bytes, bool for_overwrite) {
  if (target_.p) {  // packing into a serialised buffer (place_sections)
    if (uint64_t(bytes) != plan_.section[i].size)
      throw std::logic_error("section " + std::to_string(i) + ": " + std::to_string(bytes) +
                             " bytes packed, " + std::to_string(plan_.section[i].size) + " planned");
    unsigned char* p = bytes ? target_.p + plan_.section[i].offset : nullptr;
    if (p && !for_overwrite) std::memset(p, 0, size_t(bytes));
    sections_[i] = {p, bytes};
    return p;
  }
  WeightBuffer& b = owned_[i];
  if (for_overwrite)
    b.resize_for_overwrite(size_t(bytes));
  else
    b.resize(size_t(bytes));
  sections_[i] = {b.data(), bytes};
  return b.data();
}

void PackedWeights::check_variant(const std::string& variant_arg) const {
  check_arg(variant_arg.empty() || variant_arg == isa, "variant",
            "expected none or '" + isa + "' (the variant the weights were packed for), got '" +
                variant_arg + "'; prepare them again for it");
}

void PackedWeights::check_disjoint_from(const void* out, int64_t bytes, const char* out_arg,
                                        const char* weights_arg) const {
  check_disjoint(out, bytes, out_arg, {{buffer.p, buffer.size, weights_arg}});
  for (int i = 0; i < sections(); ++i)
    check_disjoint(out, bytes, out_arg, {{section(i), section_bytes(i), weights_arg}});
}

PackedWeights::BlobContents PackedWeights::held_sections() const {
  BlobContents c;
  for (int i = 0; i < sections(); ++i) {
    c.data[i] = section(i);
    c.bytes[i] = section_bytes(i);
  }
  return c;
}

int64_t PackedWeights::serialized_size(const SerializeOptions& o) const {
  const BlobContents c = blob_contents(o, true);
  return int64_t(blob::plan(c.bytes, sections()).total);
}

blob::Header PackedWeights::header(const BlobContents& c, const blob::LayoutPlan& plan) const {
  return blob::make_header(blob_format.op, isa, ukernel_name, layout_name, c.format, c.dims,
                           blob_format.dims, plan);
}

void PackedWeights::serialize(unsigned char* out, int64_t size, const SerializeOptions& o) const {
  const blob::LayoutPlan plan = blob::plan(blob_contents(o, true).bytes, sections());
  check_arg(size == int64_t(plan.total), "out",
            "expected " + std::to_string(plan.total) + " bytes (serialized_size), got " +
                std::to_string(size));
  check_disjoint_from(out, size, "out", arg_name_);
  const BlobContents c = blob_contents(o, false);  // may pack a layout now (ternary int8)
  const blob::Header h = header(c, plan);
  std::memset(out, 0, size_t(plan.total));  // header gaps and section padding
  for (int i = 0; i < sections(); ++i)
    if (c.bytes[i]) std::memcpy(out + plan.section[i].offset, c.data[i], size_t(c.bytes[i]));
  blob::finish(h, out);
}

void PackedWeights::place_sections(const BlobTarget& into, const int64_t* sizes) {
  const blob::LayoutPlan plan = blob::plan(sizes, sections());
  check_arg(into.size == int64_t(plan.total), "out",
            "expected " + std::to_string(plan.total) +
                " bytes (the prepared weights' serialised size), got " + std::to_string(into.size));
  check_arg(into.p != nullptr && reinterpret_cast<uintptr_t>(into.p) % blob::kAlign == 0, "out",
            "must start on a 64-byte boundary");
  // Every byte outside the sections: the header (finished by seal) and each section's padding.
  std::memset(into.p, 0, sizeof(blob::Header));
  for (int i = 0; i < plan.sections; ++i) {
    const uint64_t end = plan.section[i].offset + plan.section[i].size;
    if (plan.section[i].size && end % blob::kAlign)
      std::memset(into.p + end, 0, size_t(blob::kAlign - end % blob::kAlign));
  }
  plan_ = plan;
  target_ = into;
}

void PackedWeights::seal(const SerializeOptions& o) {
  const BlobContents c = blob_contents(o, true);
  for (int i = 0; i < sections(); ++i)
    if (uint64_t(c.bytes[i]) != plan_.section[i].size || c.bytes[i] != section_bytes(i))
      throw std::logic_error("section " + std::to_string(i) + ": " + std::to_string(c.bytes[i]) +
                             " bytes serialised, " + std::to_string(plan_.section[i].size) +
                             " planned");
  blob::finish(header(c, plan_), target_.p);
  buffer = {target_.p, target_.size};
  owner = std::move(target_.owner);
  target_ = BlobTarget();
}

void PackedWeights::view_blob(const blob::Header& h, const unsigned char* buf, int64_t size,
                              std::shared_ptr<const void> keep_alive, const int64_t* expected,
                              const char* const* what, const std::string& arg) {
  isa = blob::name(h.variant);
  ukernel_name = blob::name(h.ukernel);
  layout_name = blob::name(h.layout);
  for (int i = 0; i < sections(); ++i)
    sections_[i] = {blob::section(h, buf, i, expected[i], arg, what[i]), expected[i]};
  owner = std::move(keep_alive);
  buffer = {buf, size};
}

}  // namespace cpukern
