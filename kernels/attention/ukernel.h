// The decode-attention micro-kernel: one chunk of keys for the G query heads of one KV head.
#pragma once
#include <cstdint>

#include "kernels/common/registry.h"

namespace cpukern::attention {

struct Chunk {
  const float* q;  // G x D, float32
  int g;
  int64_t d;
  const void* k;  // key j at k + j * k_stride elements (float32 or bf16, as the kernel)
  int64_t k_stride;
  const void* v;
  int64_t v_stride;
  int64_t n;               // keys in the chunk, >= 1
  const float* bias;       // null, or head t's row at bias + t * bias_stride (n floats)
  int64_t bias_stride;     // 0: one row for every head
  float scale;
  float* scores;           // scratch: G x n_pad floats, n_pad = n rounded up to 16
  int64_t n_pad;
  // Results per head t: m[t] the largest score (-inf when every key is masked out),
  // l[t] = sum_j exp(s_j - m[t]) and acc[t * d ..] = sum_j exp(s_j - m[t]) v_j (both 0 then).
  float* m;
  float* l;
  float* acc;
};

using ChunkFn = void (*)(const Chunk& c);

struct Ukernel {
  const char* name;  // the float32-KV kernel's name
  ChunkFn f32;       // keys and values float32
  ChunkFn bf16;      // keys and values bf16
};

using Variant = ::cpukern::Variant<Ukernel>;

}  // namespace cpukern::attention

namespace cpukern::attention {
// The shipped rows (registry.cc, from the kernel list).
const Registry<Ukernel>& registry();
}  // namespace cpukern::attention
