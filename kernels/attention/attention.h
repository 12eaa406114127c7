// Attention of one new token over a KV cache (decode): the query heads that share a KV head
// (GQA; MQA and MHA are its ends) read that head's keys and values once, with an optional
// mask and optional attention sinks (gpt-oss). float32 inside; q, k, v and the output share
// one dtype, float32 or bf16.
//
// For each batch b and query head h (KV head h / (Hq / Hkv)):
//   s_j   = scale * dot(q[b, h], k[b, kv, j]) + bias_j       (bias: the mask, below)
//   out   = sum_j exp(s_j - M) v[b, kv, j] / (sum_j exp(s_j - M) + exp(sink_h - M))
// with M the largest of the s_j and sink_h (no sink: the term is left out). A key whose mask
// is false (bool) or -inf (float) takes no part. A row with no key left and no sink gives 0
// or NaN (DecodeArgs::nan_if_empty: torch's SDPA gives 0, a plain softmax NaN).
//
// Keys are taken in chunks of kChunkKeys, whose partial sums are merged in chunk order: the
// result depends on L alone, never on the thread count.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/registry.h"

namespace cpukern::attention {

enum class Dtype { kF32, kBf16 };
enum class MaskKind { kNone, kBool, kF32 };

inline constexpr int64_t kChunkKeys = 256;

struct DecodeArgs {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, length = 0, head_dim = 0;
  Dtype dtype = Dtype::kF32;
  const void* q = nullptr;  // (B, Hq, D), contiguous
  // (B, Hkv, L, D): element strides of b, head and key; D contiguous.
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride[3] = {0, 0, 0};
  int64_t v_stride[3] = {0, 0, 0};
  // (B or 1, Hq or 1, L) read at element strides (a stride of 0 broadcasts); bool: nonzero
  // bytes attend; float32: added to the score.
  MaskKind mask_kind = MaskKind::kNone;
  const void* mask = nullptr;
  int64_t mask_stride[3] = {0, 0, 0};
  const float* sinks = nullptr;  // (Hq) or null
  float scale = 1.0f;
  bool nan_if_empty = false;
  void* out = nullptr;  // (B, Hq, D), contiguous, q's dtype
};

// Runs the variant named (empty: the default) on `threads` threads (0: the pool's default).
// The arguments' shapes are the caller's to check (the extension names them); this checks
// the sizes it needs (Hq a multiple of Hkv, D >= 1) and throws InvalidArgument.
void decode(const DecodeArgs& a, const std::string& variant, int threads);

std::vector<VariantInfo> list_variants();

}  // namespace cpukern::attention
