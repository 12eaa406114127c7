// Decode attention (attention.h): the tasks are (batch, KV head, chunk of kChunkKeys keys);
// each converts its G query heads and its mask rows to float32 and runs the micro-kernel,
// whose partial results (max, sum, weighted values) are merged in chunk order with the sink.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "kernels/attention/attention.h"
#include "kernels/attention/ukernel.h"
#include "kernels/common/bf16.h"
#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/thread_pool.h"

namespace cpukern::attention {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

size_t element_bytes(Dtype t) { return t == Dtype::kF32 ? 4 : 2; }

const char* at(const void* base, int64_t elements, Dtype t) {
  return static_cast<const char*>(base) + elements * int64_t(element_bytes(t));
}

void load_floats(const void* src, Dtype t, int64_t n, float* dst) {
  if (t == Dtype::kF32) {
    std::memcpy(dst, src, sizeof(float) * n);
    return;
  }
  const bf16_t* s = static_cast<const bf16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
}

// Head row t's mask over keys j0 .. j0 + n as additive floats.
void mask_row(const DecodeArgs& a, int64_t b, int64_t hq, int64_t j0, int64_t n, float* dst) {
  const int64_t base = b * a.mask_stride[0] + hq * a.mask_stride[1] + j0 * a.mask_stride[2];
  if (a.mask_kind == MaskKind::kBool) {
    const uint8_t* m = static_cast<const uint8_t*>(a.mask) + base;
    for (int64_t j = 0; j < n; ++j) dst[j] = m[j * a.mask_stride[2]] ? 0.0f : kNegInf;
  } else {
    const float* m = static_cast<const float*>(a.mask) + base;
    for (int64_t j = 0; j < n; ++j) dst[j] = m[j * a.mask_stride[2]];
  }
}

// Partial results of one task: m[G], l[G], acc[G x D].
struct Partial {
  float* m;
  float* l;
  float* acc;
};

// out[b, hq] from the chunks' partials of its KV head and the head's sink.
void merge_head(const DecodeArgs& a, const Partial* parts, int64_t chunks, int t, int64_t hq,
                float* row) {
  const int64_t d = a.head_dim;
  float top = kNegInf;
  bool nan = false;
  for (int64_t c = 0; c < chunks; ++c) {
    const float m = parts[c].m[t];
    nan |= m != m;
    top = std::max(top, m);
  }
  const float sink = a.sinks ? a.sinks[hq] : kNegInf;
  nan |= sink != sink;
  top = std::max(top, sink);
  if (nan || top == kNegInf) {  // NaN in, or no key (and no sink) left
    const float fill = nan || (a.nan_if_empty && !a.sinks) ? std::numeric_limits<float>::quiet_NaN()
                                                           : 0.0f;
    std::fill(row, row + d, fill);
    return;
  }
  float denom = a.sinks ? std::exp(sink - top) : 0.0f;
  std::fill(row, row + d, 0.0f);
  for (int64_t c = 0; c < chunks; ++c) {
    if (parts[c].m[t] == kNegInf) continue;
    const float w = std::exp(parts[c].m[t] - top);
    denom += parts[c].l[t] * w;
    const float* acc = parts[c].acc + t * d;
    for (int64_t e = 0; e < d; ++e) row[e] += acc[e] * w;
  }
  const float inv = 1.0f / denom;
  for (int64_t e = 0; e < d; ++e) row[e] *= inv;
}

void store_row(const float* row, int64_t d, Dtype t, void* dst) {
  if (t == Dtype::kF32) {
    std::memcpy(dst, row, sizeof(float) * d);
    return;
  }
  bf16_t* o = static_cast<bf16_t*>(dst);
  for (int64_t e = 0; e < d; ++e) o[e] = f32_to_bf16(row[e]);
}

}  // namespace

void decode(const DecodeArgs& a, const std::string& variant, int threads) {
  // Messages are built only on failure: a decode step makes one call per layer.
  if (a.batch < 0 || a.length < 0) throw_arg("query", "expected batch and key length >= 0");
  if (a.kv_heads < 1 || a.q_heads < 0 || a.q_heads % a.kv_heads != 0)
    throw_arg("query", "expected the query heads (" + std::to_string(a.q_heads) +
                           ") a multiple of the key/value heads (" + std::to_string(a.kv_heads) +
                           ")");
  if (a.head_dim < 1) throw_arg("query", "expected a head size of at least 1");
  threads = limits::resolve_threads(threads);
  const Variant& row = registry().select(variant);
  const ChunkFn kernel = a.dtype == Dtype::kF32 ? row.ukernel.f32 : row.ukernel.bf16;
  const int64_t B = a.batch, hkv = a.kv_heads, d = a.head_dim, len = a.length;
  const int g = int(a.q_heads / hkv);
  if (B == 0 || g == 0) return;
  const int64_t chunks = (len + kChunkKeys - 1) / kChunkKeys;
  const int64_t n_pad = round16(std::min(len, kChunkKeys));
  const bool head_masks = a.mask_kind != MaskKind::kNone && a.mask_stride[1] != 0;
  const int64_t bias_rows = a.mask_kind == MaskKind::kNone ? 0 : head_masks ? g : 1;
  // Per task: the partials (kept for the merge), then its scratch (query, mask, scores).
  const int64_t part_floats = int64_t(g) * (d + 2);
  const int64_t scratch_floats = int64_t(g) * d + (bias_rows + g) * n_pad;
  const int64_t tasks = B * hkv * std::max<int64_t>(chunks, 1);
  const int64_t stride = part_floats + scratch_floats;
  std::unique_ptr<float[]> buf(new float[tasks * stride]);
  auto partial = [&](int64_t task) {
    float* p = buf.get() + task * stride;
    return Partial{p, p + g, p + 2 * g};
  };
  auto head_out = [&](int64_t b, int64_t hq) {
    return const_cast<char*>(at(a.out, (b * a.q_heads + hq) * d, a.dtype));
  };

  // One chunk's task; with one chunk a task also writes its heads' output.
  parallel_for(tasks, threads, [&](int64_t task) {
    const int64_t c = chunks ? task % chunks : 0, bh = chunks ? task / chunks : task;
    const int64_t b = bh / hkv, h = bh % hkv, j0 = c * kChunkKeys;
    const int64_t n = std::min(kChunkKeys, len - j0);
    Partial part = partial(task);
    if (n > 0) {
      float* q = part.acc + int64_t(g) * d;
      float* bias = q + int64_t(g) * d;
      float* scores = bias + bias_rows * n_pad;
      for (int t = 0; t < g; ++t)
        load_floats(at(a.q, (b * a.q_heads + h * g + t) * d, a.dtype), a.dtype, d, q + t * d);
      for (int64_t r = 0; r < bias_rows; ++r) mask_row(a, b, h * g + r, j0, n, bias + r * n_pad);
      const Chunk ch{q,
                     g,
                     d,
                     at(a.k, b * a.k_stride[0] + h * a.k_stride[1] + j0 * a.k_stride[2], a.dtype),
                     a.k_stride[2],
                     at(a.v, b * a.v_stride[0] + h * a.v_stride[1] + j0 * a.v_stride[2], a.dtype),
                     a.v_stride[2],
                     n,
                     bias_rows ? bias : nullptr,
                     head_masks ? n_pad : 0,
                     a.scale,
                     scores,
                     n_pad,
                     part.m,
                     part.l,
                     part.acc};
      kernel(ch);
    } else {  // no keys: only the sink (or nothing) takes part
      std::fill(part.m, part.m + g, kNegInf);
    }
    if (chunks > 1) return;
    float* row = part.acc + int64_t(g) * d;  // the scratch is free again
    for (int t = 0; t < g; ++t) {
      merge_head(a, &part, 1, t, h * g + t, row);
      store_row(row, d, a.dtype, head_out(b, h * g + t));
    }
  });
  if (chunks <= 1) return;
  parallel_for(B * hkv, threads, [&](int64_t bh) {
    const int64_t b = bh / hkv, h = bh % hkv;
    std::unique_ptr<Partial[]> parts(new Partial[chunks]);
    for (int64_t c = 0; c < chunks; ++c) parts[c] = partial(bh * chunks + c);
    float* row = parts[0].acc + int64_t(g) * d;
    for (int t = 0; t < g; ++t) {
      merge_head(a, parts.get(), chunks, t, h * g + t, row);
      store_row(row, d, a.dtype, head_out(b, h * g + t));
    }
  });
}

}  // namespace cpukern::attention
