// Packed (kernel-layout) weights, one type for every op: what the weights are (the op, the
// weight format and activation type, the variant and micro-kernel that packed them, the shape),
// their layout sections (owned, or viewed in a serialised buffer kept alive by `owner`), their
// scales, and their serialised form (kernels/common/prepared_blob.h).
//
// Each op derives its own type (ternary::PreparedWeights, widely_linear::PreparedLayer,
// moe::PackedExperts) that adds only its named dims, its section list and the checks of its
// dims and section sizes. Kernels read sections through plain pointers the derived type
// returns inline (no virtual call per kernel call).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/prepared_blob.h"

namespace cpukern {

// A caller's memory that an op's prepare packs straight into, in the serialised form (the
// prepare_into functions): `size` bytes at `p`, 64-byte aligned, exactly the op's
// prepared_size for the same arguments (else InvalidArgument naming "out"). The weights then
// view it, as from_buffer's zero-copy view would, and keep `owner` alive.
struct BlobTarget {
  unsigned char* p = nullptr;
  int64_t size = 0;
  std::shared_ptr<const void> owner;
};

class PackedWeights {
 public:
  virtual ~PackedWeights() = default;
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  // What the weights are.
  const blob::OpFormat& blob_format;  // the op's serialised form: name, dims, sections
  std::string op;                     // blob_format.op: "ternary" | "widely_linear" | "moe"
  std::string weight_format;          // the stored weights' datatype ("ternary", "bf16", ...)
  std::string act;                    // the activations the micro-kernel reads ("fp32", ...)
  std::string isa;                    // the variant (registry row) that packed them
  std::string ukernel_name;           // its micro-kernel
  std::string layout_name;            // the layout word of section 0

  // The logical shape (ternary (M, K); widely_linear (2n, 2m); moe (E, O, I)).
  virtual std::vector<int64_t> shape() const = 0;
  // Bytes of the kernel layouts held now (scales not counted).
  virtual int64_t nbytes() const { return section_bytes(0); }

  // Layout sections, in the op's serialised order (null / 0 bytes when empty).
  int sections() const { return blob_format.sections; }
  const void* section(int i) const { return sections_[i].data; }
  int64_t section_bytes(int i) const { return sections_[i].bytes; }
  // The float32 scales section (null when the op or these weights have none).
  const float* scales() const {
    return scale_section_ < 0 ? nullptr : static_cast<const float*>(section(scale_section_));
  }
  int64_t scale_bytes() const { return scale_section_ < 0 ? 0 : section_bytes(scale_section_); }

  // Packing: section i as `bytes` of owned 64-byte aligned memory (zeroed unless
  // for_overwrite: the packer then writes every byte); returns it for the packer. Between
  // place_sections and seal: section i's place in the target buffer instead (`bytes` must be
  // the planned size), zeroed the same way.
  void* own_section(int i, int64_t bytes, bool for_overwrite = false);

  // from_buffer: the serialised buffer the sections view (empty when the memory is owned),
  // kept alive by `owner` (null for a view that lives only inside one call).
  std::shared_ptr<const void> owner;
  blob::View buffer;
  bool is_view() const { return buffer.p != nullptr; }

  // The variant= of a call on these weights: "" or the variant that packed them (they run on
  // it alone), else throws naming "variant".
  void check_variant(const std::string& variant_arg) const;

  // Throws naming out_arg when [out, out + bytes) overlaps any memory these weights read
  // (the viewed buffer, every section), naming the weights `weights_arg`.
  void check_disjoint_from(const void* out, int64_t bytes, const char* out_arg,
                           const char* weights_arg) const;

  // ---- serialised form ----
  struct SerializeOptions {
    bool with_int8 = false;  // ternary: include the int8 layout (packed now if needed)
    int threads = 0;         // for packing it
  };
  int64_t serialized_size(const SerializeOptions& o) const;
  int64_t serialized_size() const { return serialized_size(SerializeOptions()); }
  // out: serialized_size(o) bytes (else throws naming "out"), disjoint from the weights.
  void serialize(unsigned char* out, int64_t size, const SerializeOptions& o) const;
  void serialize(unsigned char* out, int64_t size) const { serialize(out, size, SerializeOptions()); }

  // Packing straight into the serialised form (prepare_into), the base of every op's:
  // place_sections, before packing, plans section i at sizes[i] bytes (the op's order,
  // blob::plan) in `into` (its size and alignment checked, naming "out"), zeroes the header
  // and the padding, and from then on own_section hands out those places. seal, once every
  // section is packed, writes the header (blob_contents(o, true): names, dims, format word;
  // a section of another size than planned is a std::logic_error) and the checksum: the
  // bytes of serialize(o), and the weights view `into` (is_view()) and hold its owner.
  void place_sections(const BlobTarget& into, const int64_t* sizes);
  void seal(const SerializeOptions& o);

  // An import's zero-copy view of a parsed buffer: the header's variant, micro-kernel and
  // layout names; section i viewing the buffer after blob::section checked it holds exactly
  // expected[i] bytes (`what[i]` names it in the error); `owner` and `buffer` kept.
  void view_blob(const blob::Header& h, const unsigned char* buf, int64_t size,
                 std::shared_ptr<const void> keep_alive, const int64_t* expected,
                 const char* const* what, const std::string& arg);

 protected:
  // scale_section: the section holding float32 scales, or -1. arg_name: how errors name
  // these weights when an output overlaps them ("weights", "layer", "experts").
  PackedWeights(const blob::OpFormat& fmt, int scale_section, const char* arg_name);

  // What serialize writes besides the names: the header's dims and op-specific format word,
  // each section's bytes and (unless sizes_only) its memory.
  struct BlobContents {
    int64_t dims[blob::kMaxDims] = {};
    std::string format;
    const void* data[blob::kMaxSections] = {};
    int64_t bytes[blob::kMaxSections] = {};
  };
  virtual BlobContents blob_contents(const SerializeOptions& o, bool sizes_only) const = 0;
  // The sections held now, for blob_contents.
  BlobContents held_sections() const;
  // The header of these weights' blob with contents c laid out by plan (checksum 0).
  blob::Header header(const BlobContents& c, const blob::LayoutPlan& plan) const;

 private:
  struct Section {
    const void* data = nullptr;
    int64_t bytes = 0;
  };
  Section sections_[blob::kMaxSections];
  WeightBuffer owned_[blob::kMaxSections];
  // Between place_sections and seal: the buffer packed into and its plan.
  BlobTarget target_;
  blob::LayoutPlan plan_;
  int scale_section_;
  const char* arg_name_;
};

}  // namespace cpukern
