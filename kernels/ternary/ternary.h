// Ternary GEMV ({-1, 0, +1} weights, 16 per uint32), the public C++ API.
// Every function validates its arguments and throws cpukern::InvalidArgument naming the
// argument before touching any output.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/packed_weights.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/common/registry.h"
#include "kernels/common/ternary_codes.h"

namespace cpukern::ternary {

using ternary_codes::words_for;

// Public packed format: weight j of a row goes to word j/16, bits 2*(j%16)+1 (+1) and
// 2*(j%16) (-1); zero is 00; code 11 is invalid; codes past k are zero.
// w: (m, k) int8. packed: (m, words_for(k)).
void pack(const int8_t* w, int64_t m, int64_t k, uint32_t* packed);
// packed: (m, words) with words == words_for(k). w: (m, k) int8.
void unpack(const uint32_t* packed, int64_t m, int64_t words, int64_t k, int8_t* w);
// The public format's rule (unpack's and prepare's): the index (row-major) of the first word of
// rows [0, m) with a code 0b11 or a nonzero code past k, or -1; throw_bad_word names that word
// (and the weight) in an InvalidArgument for "packed".
int64_t first_bad_word(const uint32_t* packed, int64_t m, int64_t words, int64_t k);
[[noreturn]] void throw_bad_word(int64_t index, uint32_t word, int64_t words, int64_t k);
// BitNet b1.58 absmean: s = mean|W| per row (or over the whole tensor), q = clamp(round(W/s), -1, 1).
// w: (m, k) float32. packed: (m, words_for(k)); scale: (m,) (the same value repeated when per_tensor).
void quantize(const float* w, int64_t m, int64_t k, bool per_tensor, uint32_t* packed, float* scale);

// kInt8: q = round(x * 127 / max|x|) per row; kInt8BitNet: Hugging Face BitNet's rule
// (act_bitnet.h: max|x| floored at 1e-5). Both run the same int8 micro-kernels.
enum class Act { kF32, kInt8, kInt8BitNet };
// "fp32" | "int8" | "int8_bitnet", else throws naming "act"
Act parse_act(const std::string& act);

struct TernaryGemvUkernel;  // see ukernel.h
using Variant = cpukern::Variant<TernaryGemvUkernel>;  // a registry row

// op "ternary"; dims = {m, k, group_size, has_scale}; sections: 0 the fp32 layout, 1 the
// scales as prepared (float32 (m,) or group-major (groups, m); empty without), 2 the int8
// layout (empty when not included or when it is the fp32 layout's bytes).
inline constexpr blob::OpFormat kBlobFormat{"ternary", 4, 3};

// Weights converted once into one variant's layouts (a cpukern::PackedWeights: format
// "ternary", act "fp32"; the same weights also run int8 activations). Shared across threads:
// the int8 layout is packed (once) at the first int8 gemv, so fp32-only use stores the fp32
// layout alone. Sections are owned, or (from_buffer) views into a serialised buffer kept alive
// by `owner`.
struct PreparedWeights final : PackedWeights {
  enum Section { kF32Layout = 0, kScales = 1, kI8Layout = 2 };
  PreparedWeights() : PackedWeights(kBlobFormat, kScales, "weights") {
    weight_format = "ternary";
    act = "fp32";
  }
  const Variant* variant = nullptr;  // the registry row (or a SIMDe row in tests)
  int64_t m = 0, k = 0;
  int64_t group_size = 0;  // > 0: one scale per row and group of group_size columns

  const void* layout() const { return section(kF32Layout); }
  int64_t layout_bytes() const { return section_bytes(kF32Layout); }
  // scales(): (m,), or (groups, m) group-major when group_size > 0, or null
  bool has_scale() const { return scales() != nullptr; }
  // The int8 micro-kernel's layout (packs it on first use, on `threads` threads as in gemv;
  // thread-safe).
  const void* i8_data(int threads = 0) const;
  // Whether the int8 layout exists without packing (packed already, carried by the
  // imported buffer, or the same bytes as the fp32 layout).
  bool i8_ready() const;
  // Bytes held now: the fp32 layout, plus the int8 one once packed.
  int64_t nbytes() const override { return layout_bytes() + i8_bytes_.load(); }
  std::vector<int64_t> shape() const override { return {m, k}; }

 protected:
  BlobContents blob_contents(const SerializeOptions& o, bool sizes_only) const override;

 private:
  mutable std::once_flag i8_once_;
  mutable WeightBuffer i8_buf_;
  mutable const void* i8_ptr_ = nullptr;
  mutable std::atomic<int64_t> i8_bytes_{0};
};

// packed: (m, words), words == words_for(k), every code valid and codes past k zero.
// scale: nullptr or (m,); with group_size > 0 (a multiple of 16), (m, groups_for(k, G))
// row-major, required: one scale per row and group of G columns (kernels/ternary/grouped.h).
// isa: "" = default selection. threads: as in gemv (the layout's bytes do not depend on it).
std::shared_ptr<const PreparedWeights> prepare(const uint32_t* packed, int64_t m, int64_t words,
                                               int64_t k, const float* scale,
                                               const std::string& isa, int threads = 0,
                                               int64_t group_size = 0);
inline int64_t groups_for(int64_t k, int64_t group_size) {
  return (k + group_size - 1) / group_size;
}

// y[b, r] = s[r] * sum_j w[r, j] * x[b, j] for b < batch (with group scales:
// sum_g s[r, g] * sum_{j in g} w[r, j] x[b, j], and scale_len must be 0).
// x: (batch, k) float32 row-major; y: (batch, m). scale: scale_len 0 -> the prepared scale
// (or 1 when it has none); 1 -> one scalar; m -> per row. threads: 0 = the default,
// 1..limits::kMaxThreads explicit (limits::resolve_threads).
void gemv(const PreparedWeights& w, const float* x, int64_t batch, const float* scale,
          int64_t scale_len, Act act, int threads, float* y);

// The n matrices of one layer that share their input (a layer's q, k, v projections, or its
// gate and up), in one call: y_i = gemv(*ws[i], x, batch, nullptr, 0, act, threads, ys[i]),
// bitwise, for every i (each with its prepared scales). With act int8 / int8_bitnet and every
// matrix of the same variant without group scales, x is quantised once and one task list
// covers the rows of all n (one fork/join); otherwise the n calls run one after another.
// Every matrix takes the same K (else throws naming "weights"); outputs are disjoint from
// each other, from x and from every matrix's memory (else throws naming "out").
void gemv_multi(const PreparedWeights* const* ws, int64_t n, const float* x, int64_t batch,
                Act act, int threads, float* const* ys);

// gemv's check of x's columns against the weights' K, for callers that hold x with its shape
// (gemv itself reads x as rows of K): throws naming "x", with `got` describing x.
void check_x_columns(const PreparedWeights& w, int64_t columns, const std::string& got);

std::vector<VariantInfo> list_variants();

// ---- serialised form (kBlobFormat; kernels/common/prepared_blob.h) ------------------------
// Thin wrappers of w.serialized_size / w.serialize ({with_int8, threads}). with_int8: include
// the int8 layout (serialize packs it now if needed; threads as in gemv).
int64_t serialized_size(const PreparedWeights& w, bool with_int8);
void serialize(const PreparedWeights& w, bool with_int8, int threads, unsigned char* out,
               int64_t size);

// Packing straight into the serialised form, without an owned copy of the layout:
// prepared_size is the size of that form for prepare's arguments (checked as prepare checks
// them; has_scale: a scale is given), and prepare_into packs into `into` (exactly that many
// bytes, 64-byte aligned, disjoint from packed and scale, else throws naming "out"). Its
// result views `into` as from_buffer would; the bytes are those of
// serialize(*prepare(...), with_int8 || w.i8_ready()) (cpukern's to_bytes), checksum included.
// with_int8: pack the int8 layout into it too (empty weights carry theirs anyway).
int64_t prepared_size(int64_t m, int64_t words, int64_t k, bool has_scale, const std::string& isa,
                      int64_t group_size, bool with_int8);
std::shared_ptr<const PreparedWeights> prepare_into(const uint32_t* packed, int64_t m,
                                                    int64_t words, int64_t k, const float* scale,
                                                    const std::string& isa, int threads,
                                                    int64_t group_size, bool with_int8,
                                                    const BlobTarget& into);

// Weights from a serialised buffer (size bytes at buf, 64-byte aligned). The header is
// validated in O(1) against itself and the size (errors name opts.arg), the checksum of
// header and payload when opts.verify. When the buffer's variant runs on this CPU (and
// opts.isa is "" or that variant), the result VIEWS the buffer (zero-copy; `owner` keeps it
// alive). Otherwise (prepared on another CPU, or another isa forced) the layout is unpacked to
// the public words, validated and prepared again for opts.isa ("" = default) with
// opts.threads, unless !opts.allow_reprepare (an error then). A layout this build cannot
// unpack gives InvalidArgument naming opts.arg.
using ImportOptions = blob::ImportOptions<Variant>;
std::shared_ptr<const PreparedWeights> from_buffer(const unsigned char* buf, int64_t size,
                                                   std::shared_ptr<const void> owner,
                                                   const ImportOptions& opts);

}  // namespace cpukern::ternary
