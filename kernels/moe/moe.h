// Fused Mixture-of-Experts (bf16 weights and activations, fp32 accumulation), the public
// C++ API, with vLLM cpu_fused_moe semantics. Every function validates its arguments and
// throws cpukern::InvalidArgument naming the argument before touching any output.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/bf16.h"
#include "kernels/common/packed_weights.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/common/registry.h"

namespace cpukern::moe {

enum class Activation { kSilu, kGelu, kGeluTanh, kSwigluOai };
Activation parse_activation(const std::string& name);  // else throws naming "activation"

// How a router turns a token's e logits into its top-k experts and their weights.
// kSoftmaxTopk: softmax over all e experts, then the k largest probabilities, optionally
// renormalised to sum 1 (Qwen3-MoE, Mixtral, vLLM's default). kTopkSoftmax: the k largest
// logits, then a softmax over those k (gpt-oss); renormalising would change nothing, so it is
// refused. Both: ties go to the lower expert id, NaN never beats a number; float32 arithmetic.
enum class RouteRule { kSoftmaxTopk, kTopkSoftmax };
RouteRule parse_route_rule(const std::string& name);  // "softmax_topk" | "topk_softmax", else
                                                      // throws naming "rule"

// logits: (t, e) float32; weights: (t, topk) float32; ids: (t, topk) int32.
void route(const float* logits, int64_t t, int64_t e, int64_t topk, bool renormalize,
           float* weights, int32_t* ids, RouteRule rule = RouteRule::kSoftmaxTopk);

struct Ukernel;     // the micro-kernel interface (ukernel.h)
struct GemmConfig;  // a registry row: its ukernel per format (ukernel.h)

// Expert weight formats. kBf16: (e, o, i) bf16. kMxfp4: gpt-oss's on-disk layout, blocks
// (e, o, i/32, 16) uint8 (e2m1 pairs, low nibble first) + scales (e, o, i/32) uint8 (e8m0,
// 2**(s-127)); i % 32 == 0; a scale of 255 (NaN in OCP MX) is refused (kernels/moe/mxfp4.h).
// kInt8: W8A8, per-output-channel symmetric int8 weights (e, o, i) in [-127, 127] with fp32
// scales (e, o) (W = q * s), activations quantised per token at run time (kernels/moe/int8.h).
// kMxfp4A8: W4A8, kMxfp4's weights with activations quantised per token to int8 as kInt8 does
// (opt-in, not exact: the arithmetic and its error bound are in kernels/moe/w4a8_loop.h).
enum class WeightFormat { kBf16 = 0, kMxfp4 = 1, kInt8 = 2, kMxfp4A8 = 3 };
inline constexpr int kNumFormats = 4;
const char* format_name(WeightFormat f);           // "bf16", "mxfp4", "int8", "mxfp4_a8"
WeightFormat parse_format(const std::string& name);  // else throws naming "format"

// What a prepare call (cpukern.moe.prepare(w, format=, scales=, act=)) packs: `format` one of
// "bf16", "mxfp4", "int8" (else throws naming "format"); `act` "fp32" or "int8", and "int8"
// (W4A8, kMxfp4A8) only with "mxfp4" (else throws naming "act"); scales given exactly with
// "mxfp4" and "int8" (else throws naming "scales").
WeightFormat prepare_format(const std::string& format, const std::string& act, bool has_scales);

// Weight quantisation (cpukern.moe.quantize) of rows of k weights: kInt8 needs k >= 1, kMxfp4
// a positive multiple of 32; else throws naming "w" (`got` describes the weights).
void check_quantize_k(WeightFormat format, int64_t k, const std::string& got);

// op "moe"; format "bf16" | "mxfp4" | "int8" | "mxfp4_a8"; dims = {e, o, i}; one section: the
// packed experts as prepare wrote them.
inline constexpr blob::OpFormat kBlobFormat{"moe", 3, 1};

// Expert weights (e, o, i) in nn.Linear [out, in] order, packed for one kernel family (a
// registry row) in one format (a cpukern::PackedWeights: weight_format the format's name, act
// "bf16" or, for int8 and mxfp4_a8, "int8"). Weights are never expanded: MXFP4 stays 4.25 bits
// per weight. Any scales live inside the packed section.
struct PackedExperts final : PackedWeights {
  PackedExperts() : PackedWeights(kBlobFormat, -1, "experts") {}
  const cpukern::Variant<GemmConfig>* variant = nullptr;  // the registry row
  const Ukernel* ukernel = nullptr;                        // the row's ukernel for `format`
  WeightFormat format = WeightFormat::kBf16;
  int64_t e = 0, o = 0, i = 0;
  // Sets what the experts are (the row, its micro-kernel for `f`, the shape); the section is
  // the caller's to fill.
  void identify(const cpukern::Variant<GemmConfig>& row, WeightFormat f, int64_t experts,
                int64_t out_features, int64_t in_features);
  const char* packed() const { return static_cast<const char*>(section(0)); }
  std::vector<int64_t> shape() const override { return {e, o, i}; }

 protected:
  BlobContents blob_contents(const SerializeOptions& o, bool sizes_only) const override;
};

// Every prepare*: e, o, i >= 1, else throws naming "w" (the weights, whatever their format);
// variant (`isa`) "" (the default) or a variant this CPU runs (else throws naming "variant").
// into: pack straight into that serialised buffer, without an owned copy of the packing
// (BlobTarget: exactly prepared_size(...) bytes, 64-byte aligned, disjoint from the weights,
// else throws naming "out"); the result views it as from_buffer would, and its bytes are
// those of serialize(*prepare*(...)), checksum included.
std::shared_ptr<const PackedExperts> prepare(const bf16_t* w, int64_t e, int64_t o, int64_t i,
                                             const std::string& isa,
                                             const BlobTarget* into = nullptr);
// MXFP4 experts: blocks (e, o, i/32, 16), scales (e, o, i/32); i a multiple of 32 (throws
// naming "i"), no scale 255 (throws naming "scales" with its position). format: kMxfp4 (exact)
// or kMxfp4A8 (int8 activations; else throws naming "format").
std::shared_ptr<const PackedExperts> prepare_mxfp4(const uint8_t* blocks, const uint8_t* scales,
                                                   int64_t e, int64_t o, int64_t i,
                                                   const std::string& isa,
                                                   WeightFormat format = WeightFormat::kMxfp4,
                                                   const BlobTarget* into = nullptr);
// int8 experts: q (e, o, i) int8 in [-127, 127] (-128 throws naming "w"), scales (e, o) fp32,
// finite and >= 0 (else throws naming "scales" with its position); i <= int8::kMaxK (the int32
// sums stay exact; throws naming "i").
std::shared_ptr<const PackedExperts> prepare_int8(const int8_t* q, const float* scales, int64_t e,
                                                  int64_t o, int64_t i, const std::string& isa,
                                                  const BlobTarget* into = nullptr);
// The bytes of the serialised form of experts of `format` (e, o, i) packed for `isa`: the
// size of prepare*'s `into`. Checks the shape and isa as prepare* does (not the arrays).
int64_t prepared_size(WeightFormat format, int64_t e, int64_t o, int64_t i,
                      const std::string& isa);

// x: (t, h) bf16; w13 packed from (e, 2I, h); w2 packed from (e, h, I) (same variant, any
// formats);
// topk_weights (t, topk) float32; topk_ids (t, topk) int32 in [0, e);
// w13_bias (e, 2I) / w2_bias (e, h) bf16 or nullptr; out: (t, h) bf16;
// threads: 0 = the default, 1..limits::kMaxThreads (limits::resolve_threads).
void fused_moe(const bf16_t* x, int64_t t, int64_t h, const PackedExperts& w13,
               const PackedExperts& w2, const float* topk_weights, const int32_t* topk_ids,
               int64_t topk, Activation activation, const bf16_t* w13_bias,
               const bf16_t* w2_bias, bool skip_weighted, int threads, bf16_t* out);
// fused_moe with int64 topk_ids (torch.topk's index dtype), range-checked before narrowing:
// 2**32 + 1 is refused, never read as expert 1.
void fused_moe_int64_ids(const bf16_t* x, int64_t t, int64_t h, const PackedExperts& w13,
                         const PackedExperts& w2, const float* topk_weights,
                         const int64_t* topk_ids, int64_t topk, Activation activation,
                         const bf16_t* w13_bias, const bf16_t* w2_bias, bool skip_weighted,
                         int threads, bf16_t* out);

// A dense layer on the same micro-kernels (one expert, no routing): out (t, w.o) bf16 =
// bf16(x (t, w.i) bf16 . W^T + bias) for W packed by prepare* with e == 1 (any format), bias
// (w.o) bf16 or nullptr; fp32 accumulation, one rounding to bf16. As in fused_moe, every
// output element is one full-K dot product, so results do not depend on the thread count or
// on how many rows share a call. threads as for fused_moe.
void linear(const bf16_t* x, int64_t t, int64_t k, const PackedExperts& w, const bf16_t* bias,
            int threads, bf16_t* out);

// A model's whole router in one call, as transformers' bf16 routers compute it: logits =
// bf16(x (t, h) . Wr^T + bias) on linear()'s kernel (Wr packed by prepare* with e == 1 and
// o = the number of experts, bias (o) bf16 or nullptr), then route() on those bf16 logits;
// the weights are rounded once to bf16 (transformers casts the routing weights to the
// logits' dtype) and the ids are int64 (torch.topk's). Outputs: logits (t, o), weights and
// ids (t, topk). Every argument is checked before any output is written.
void router(const bf16_t* x, int64_t t, int64_t h, const PackedExperts& w, const bf16_t* bias,
            int64_t topk, RouteRule rule, bool renormalize, int threads, bf16_t* logits,
            bf16_t* weights, int64_t* ids);

std::vector<VariantInfo> list_variants();

// ---- linear: the dense layer as an op of its own ------------------------------------------
// Its variants are the fused-MoE rows themselves (one kernel list, the same micro-kernels and
// priorities) under the op name "linear": CPUKERN_VARIANT's "linear=<name>" forces them for the
// dense layer alone, and errors and listings say "linear". Its weights are one expert
// (PackedExperts with op "moe" and e == 1: the MoE packing, byte for byte, and its
// serialised form), packed by prepare* for the row linear_variant names; linear() above runs
// them.
std::vector<VariantInfo> list_linear_variants();
// The name of the row a dense layer packs for: `variant` ("" = linear's default: CPUKERN_VARIANT
// if it forces one for linear, else the best this CPU runs), else throws naming "variant"
// (unknown for linear, or needing features this CPU lacks).
std::string linear_variant(const std::string& variant);

// ---- serialised form (kBlobFormat; kernels/common/prepared_blob.h; serialize.cc) ----------
// Thin wrappers of w.serialized_size / w.serialize. MoE packings cannot be unpacked, so a
// buffer for a variant this CPU cannot run (or not the one opts.isa forces) is an error
// (allow_reprepare and threads are not used): prepare again from the expert weights.
using ImportOptions = blob::ImportOptions<cpukern::Variant<GemmConfig>>;
int64_t serialized_size(const PackedExperts& w);
void serialize(const PackedExperts& w, unsigned char* out, int64_t size);
// O(1) header validation against `size` (InvalidArgument naming opts.arg), the checksum of
// header and payload when opts.verify; the result views the buffer (zero-copy) and holds
// `owner` until it is destroyed.
std::shared_ptr<const PackedExperts> from_buffer(const unsigned char* buf, int64_t size,
                                                 std::shared_ptr<const void> owner,
                                                 const ImportOptions& opts);

}  // namespace cpukern::moe
