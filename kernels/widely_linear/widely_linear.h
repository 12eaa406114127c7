// Fused widely-linear ternary layer (Fairy2i): y = U x + W conj(x), the public C++ API.
// Planes are ordered U_re, U_im, W_re, W_im, each packed like cpukern::ternary::pack.
// Every function validates its arguments and throws cpukern::InvalidArgument naming the
// argument before touching any output.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/packed_weights.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/common/registry.h"

namespace cpukern::widely_linear {

// a: (2n, 2m) float32 (nn.Linear [out, in]). planes: (stages, 4, n, ceil(m/16)) uint32;
// scales: (stages, 4) float32 = per-tensor s of U_re, U_im, W_re, W_im per stage.
void phase_quantize(const float* a, int64_t n, int64_t m, int64_t stages, uint32_t* planes,
                    float* scales);

// The real (2n, 2m) matrix the quantised layer represents. scales: (stages, 4) or, when
// scales_per_row, (stages, 4, n).
void dense(const uint32_t* planes, const float* scales, bool scales_per_row, int64_t stages,
           int64_t n, int64_t words, int64_t m, float* a);

struct Ukernel;  // the micro-kernel interface (ukernel.h)
using Variant = cpukern::Variant<Ukernel>;  // a registry row

// op "widely_linear"; dims = {stages, n, m}; sections: 0 the layout, 1 the scales float32
// (stages, 4, n).
inline constexpr blob::OpFormat kBlobFormat{"widely_linear", 3, 2};

// A prepared layer (a cpukern::PackedWeights: format "ternary", act "fp32"). Its sections are
// owned or, imported with from_buffer, views into a serialised buffer kept alive by `owner`.
struct PreparedLayer final : PackedWeights {
  enum Section { kLayout = 0, kScales = 1 };
  PreparedLayer() : PackedWeights(kBlobFormat, kScales, "layer") {
    weight_format = "ternary";
    act = "fp32";
  }
  const Variant* variant = nullptr;
  std::string packer;  // the packer prepare() chose for the variant's layout
  int64_t stages = 0, n = 0, m = 0;
  const void* layout() const { return section(kLayout); }
  const float* scale_data() const { return scales(); }  // (stages, 4, n), per row always
  std::vector<int64_t> shape() const override { return {2 * n, 2 * m}; }

 protected:
  BlobContents blob_contents(const SerializeOptions& o, bool sizes_only) const override;
};

// into: pack straight into that serialised buffer, without an owned copy of the layout
// (BlobTarget: exactly prepared_size(...) bytes, 64-byte aligned, disjoint from planes and
// scales, else throws naming "out"); the result views it as from_buffer would, and its bytes
// are those of serialize(*prepare(...)), checksum included.
std::shared_ptr<const PreparedLayer> prepare(const uint32_t* planes, const float* scales,
                                             bool scales_per_row, int64_t stages, int64_t n,
                                             int64_t words, int64_t m, const std::string& isa,
                                             const BlobTarget* into = nullptr);
// The bytes of that serialised form for prepare's arguments (the dims and isa checked as
// prepare checks them).
int64_t prepared_size(int64_t stages, int64_t n, int64_t words, int64_t m, const std::string& isa);

// x: (batch, 2m) = [x_re | x_im] per row; y: (batch, 2n) = [y_re | y_im].
// fused=false runs the naive schedule: 8 separate GEMV passes per stage over the same bytes.
void run(const PreparedLayer& layer, const float* x, int64_t batch, bool fused, int threads,
         float* y);

// run's check of x's columns against the layer's 2m, for callers that hold x with its shape
// (run itself reads x as rows of 2m): throws naming "x", with `got` describing x.
void check_x_columns(const PreparedLayer& layer, int64_t columns, const std::string& got);

std::vector<VariantInfo> list_variants();

// ---- serialised form (kBlobFormat; kernels/common/prepared_blob.h) ------------------------
// Thin wrappers of layer.serialized_size / layer.serialize.
int64_t serialized_size(const PreparedLayer& layer);
void serialize(const PreparedLayer& layer, unsigned char* out, int64_t size);
// A layer from a serialised buffer (64-byte aligned): the header is validated in O(1) against
// itself and the size (errors name opts.arg), the checksum of header and payload when
// opts.verify. A variant this CPU runs (and opts.isa "" or that one): a zero-copy view (`owner`
// keeps the buffer alive). Otherwise, when opts.allow_reprepare and the layout is the public
// one (t2p16x4), prepared again for opts.isa; other layouts cannot be unpacked:
// InvalidArgument naming opts.arg.
using ImportOptions = blob::ImportOptions<Variant>;
std::shared_ptr<const PreparedLayer> from_buffer(const unsigned char* buf, int64_t size,
                                                 std::shared_ptr<const void> owner,
                                                 const ImportOptions& opts);

}  // namespace cpukern::widely_linear
