// The serialised form of PreparedWeights (ternary.h, kernels/common/packed_weights.h): its
// sections and dims, the checks of a buffer's dims and section sizes, and re-preparation of a
// layout made on another CPU (unpacked to the public words by that layout's portable packer).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/ternary/grouped.h"
#include "kernels/ternary/ternary.h"
#include "kernels/ternary/ukernel.h"
#include "kernels/ternary/ukernels/layouts.h"

namespace cpukern::ternary {
namespace {

// dims {m, k, group_size, has_scale}; sections: PreparedWeights::Section; format: the int8
// layout's word when that section is written, else "".
constexpr const blob::OpFormat& kOp = kBlobFormat;
enum Dim { kM, kK, kGroup, kHasScale };

std::string s(int64_t v) { return std::to_string(v); }

// Bytes of a layout for (m, k) with these groups, as prepare writes it.
int64_t layout_size(int64_t (*size)(int64_t, int64_t), int64_t m, int64_t k, int64_t g) {
  if (g > 0 && m > 0 && k > 0) return grouped::Plan(m, k, g, size).bytes();
  return size(m, k);
}

int64_t scale_floats(int64_t m, int64_t k, int64_t g, bool has_scale) {
  if (!has_scale) return 0;
  return g > 0 ? m * groups_for(k, g) : m;
}

bool same_layout(const Variant& v) {
  return std::strcmp(v.ukernel.f32.layout, v.ukernel.i8.layout) == 0;
}

// The packer (any supported one) that can unpack `layout`, or null.
const Packer* unpacker_for(const std::string& layout) {
  for (const PackerRow& p : packers())
    if (layout == p.layout && p.supported() && p.packer.unpack) return &p.packer;
  return nullptr;
}

}  // namespace

void section_sizes(const Variant& v, int64_t m, int64_t k, int64_t g, bool has_scale,
                   bool with_int8, int64_t sizes[3]) {
  sizes[PreparedWeights::kF32Layout] = layout_size(v.ukernel.f32.packed_size, m, k, g);
  sizes[PreparedWeights::kScales] = 4 * scale_floats(m, k, g, has_scale);
  sizes[PreparedWeights::kI8Layout] =
      with_int8 && !same_layout(v) ? layout_size(v.ukernel.i8.packed_size, m, k, g) : 0;
}

PackedWeights::BlobContents PreparedWeights::blob_contents(const SerializeOptions& o,
                                                           bool sizes_only) const {
  BlobContents c = held_sections();
  const int64_t dims[4] = {m, k, group_size, has_scale() ? 1 : 0};
  std::copy(dims, dims + 4, c.dims);
  c.data[kI8Layout] = nullptr;
  c.bytes[kI8Layout] = 0;
  if (o.with_int8 && !same_layout(*variant)) {
    c.format = variant->ukernel.i8.layout;
    c.bytes[kI8Layout] = layout_size(variant->ukernel.i8.packed_size, m, k, group_size);
    if (!sizes_only) c.data[kI8Layout] = i8_data(o.threads);
  }
  return c;
}

int64_t serialized_size(const PreparedWeights& w, bool with_int8) {
  return w.serialized_size({with_int8, 0});
}

void serialize(const PreparedWeights& w, bool with_int8, int threads, unsigned char* out,
               int64_t size) {
  w.serialize(out, size, {with_int8, threads});
}

std::shared_ptr<const PreparedWeights> from_buffer(
    const unsigned char* buf, int64_t size, std::shared_ptr<const void> owner,
    const ImportOptions& opts, const Registry<TernaryGemvUkernel>& rows) {
  const std::string& arg = opts.arg;
  const blob::Header h = blob::parse_import(buf, size, kOp, opts);
  const int64_t m = h.dims[kM], k = h.dims[kK], g = h.dims[kGroup], has_scale = h.dims[kHasScale];
  check_arg(m >= 0 && k >= 0 && k <= limits::kMaxElements && m <= limits::kMaxElements, arg,
            "corrupted header (shape " + s(m) + " x " + s(k) + ")");
  checked_mul(m, std::max<int64_t>(1, words_for(k)) * 16, arg.c_str());
  check_arg(g == 0 || (g >= 16 && g % 16 == 0 && g <= limits::kMaxElements), arg,
            "corrupted header (group size " + s(g) + ")");
  check_arg(has_scale == 0 || has_scale == 1, arg, "corrupted header (scale flag)");
  check_arg(g == 0 || has_scale == 1 || m * k == 0, arg,
            "corrupted header (group scales missing)");
  // The scales' size first (O(1)): it bounds the group count that sizing a grouped layout
  // walks (group scales are required whenever there are weights).
  const int64_t nscale = scale_floats(m, k, g, has_scale == 1);
  const float* sc = reinterpret_cast<const float*>(
      blob::section(h, buf, PreparedWeights::kScales, 4 * nscale, arg, "scales"));
  // The int8 layout's exact size, whichever path follows (re-preparing drops it).
  const std::string i8_layout = blob::name(h.format);
  int64_t i8_bytes = 0;
  if (!i8_layout.empty()) {
    const layouts::SizeFn i8_size = layouts::size_fn(i8_layout.c_str());
    check_arg(i8_size != nullptr, arg, "corrupted header (int8 layout '" + i8_layout + "')");
    i8_bytes = layout_size(i8_size, m, k, g);
  }
  blob::section(h, buf, PreparedWeights::kI8Layout, i8_bytes, arg, "int8 layout");

  // The row that made it, if this build has it and this CPU runs it.
  // Plain variables, not a structured binding: lambdas below capture them (C++17).
  const auto found = blob::import_rows(
      h, rows, opts.isa, [](const Variant& r, const std::string& uk, const std::string& lo) {
        return uk == r.ukernel.f32.name && lo == r.ukernel.f32.layout;
      });
  const Variant* const made_by = found.first;
  const Variant* const want = found.second;

  if (want == made_by) {  // zero-copy view
    const Variant& v = *made_by;
    check_arg(i8_layout.empty() || (!same_layout(v) && i8_layout == v.ukernel.i8.layout), arg,
              "corrupted header (int8 layout '" + i8_layout + "', the variant reads '" +
                  (same_layout(v) ? std::string("its fp32 layout") : v.ukernel.i8.layout) + "')");
    auto w = new_weights(v, m, k, g);
    int64_t expected[3];  // the row's own int8 size: the same layout word
    section_sizes(v, m, k, g, has_scale == 1, !i8_layout.empty(), expected);
    const char* const what[3] = {"fp32 layout", "scales", "int8 layout"};
    w->view_blob(h, buf, size, std::move(owner), expected, what, arg);
    return w;
  }

  // Prepared on another CPU (or another variant asked for): back to the public words, with
  // the packer of its layout (one this build has and whose size it knows).
  const std::string layout = blob::name(h.layout);
  const Packer* from = unpacker_for(layout);
  const layouts::SizeFn size_fn = layouts::size_fn(layout.c_str());
  blob::check_can_prepare_again(h, arg, opts.allow_reprepare, made_by != nullptr,
                                from != nullptr && size_fn != nullptr,
                                "prepare it again from the packed weights");
  const int64_t f32_bytes = layout_size(size_fn, m, k, g);
  const unsigned char* src = blob::section(h, buf, PreparedWeights::kF32Layout, f32_bytes, arg, "fp32 layout");
  const int64_t words = words_for(k);
  std::vector<uint32_t> packed(size_t(m * words));
  if (m > 0 && k > 0) {
    if (g > 0) {
      grouped::unpack(grouped::Plan(m, k, g, size_fn), *from, src, k, packed.data());
    } else {
      from->unpack(src, m, k, packed.data());
    }
  }
  std::vector<float> row_major;  // group scales back to (m, groups)
  if (sc && g > 0) {
    const int64_t groups = groups_for(k, g);
    row_major.resize(size_t(m * groups));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t gi = 0; gi < groups; ++gi) row_major[size_t(r * groups + gi)] = sc[gi * m + r];
    sc = row_major.data();
  }
  return blob::prepare_again(
      arg, [&] { return prepare_variant(*want, packed.data(), m, k, sc, opts.threads, g); });
}

std::shared_ptr<const PreparedWeights> from_buffer(const unsigned char* buf, int64_t size,
                                                   std::shared_ptr<const void> owner,
                                                   const ImportOptions& opts) {
  return from_buffer(buf, size, std::move(owner), opts, registry());
}

}  // namespace cpukern::ternary
