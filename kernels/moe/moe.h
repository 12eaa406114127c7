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
#include "kernels/common/registry.h"

namespace cpukern::moe {

enum class Activation { kSilu, kGelu, kGeluTanh, kSwigluOai };
Activation parse_activation(const std::string& name);  // else throws naming "activation"

// Softmax over e experts, then top-k (ties to the lower id), optionally renormalised.
// logits: (t, e) float32; weights: (t, topk) float32; ids: (t, topk) int32.
void route(const float* logits, int64_t t, int64_t e, int64_t topk, bool renormalize,
           float* weights, int32_t* ids);

struct Ukernel;  // the micro-kernel interface (ukernel.h)

// Expert weights (e, o, i) bf16 in nn.Linear [out, in] order, packed for one kernel family.
struct PackedExperts {
  const cpukern::Variant<Ukernel>* variant = nullptr;  // the registry row
  std::string isa;
  int64_t e = 0, o = 0, i = 0;
  AlignedBuffer data;
  int64_t nbytes() const { return int64_t(data.size()); }
};

std::shared_ptr<const PackedExperts> prepack(const bf16_t* w, int64_t e, int64_t o, int64_t i,
                                             const std::string& isa);

// x: (t, h) bf16; w13 packed from (e, 2I, h); w2 packed from (e, h, I) (same isa);
// topk_weights (t, topk) float32; topk_ids (t, topk) int32 in [0, e);
// w13_bias (e, 2I) / w2_bias (e, h) bf16 or nullptr; out: (t, h) bf16;
// threads: 0 = the default, 1..limits::kMaxThreads (limits::resolve_threads).
void fused_moe(const bf16_t* x, int64_t t, int64_t h, const PackedExperts& w13,
               const PackedExperts& w2, const float* topk_weights, const int32_t* topk_ids,
               int64_t topk, Activation activation, const bf16_t* w13_bias,
               const bf16_t* w2_bias, bool skip_weighted, int threads, bf16_t* out);

std::vector<VariantInfo> list_variants();

}  // namespace cpukern::moe
