// The fused-MoE driver, written once for every variant: validation, counting sort of
// (token, slot) pairs by expert, then three parallel stages over tasks pulled from the pool:
//   1. (expert, tile of I): gate+up GEMM of the expert's tokens, w13 bias, activation -> bf16
//      rows of an expert-sorted buffer;
//   2. (expert, tile of H): down GEMM of those rows -> fp32 expert-sorted outputs;
//   3. (block of tokens): out[t] = sum_j w[t,j] * (y[row(t,j)] + b2), j in slot order, fp32.
// Every output element is one full-K dot product computed by the same code whatever the tiling
// and thread count, and stage 3 sums in a fixed order, so results are bitwise identical for any
// number of threads. linear (a dense layer: one expert, no routing) reuses the packing of rows,
// the tiling and the tasks of stage 2. Packing the weights: prepare.cc.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/cpu_features.h"
#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/scratch.h"
#include "kernels/common/thread_pool.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {

namespace {

// Per calling thread: sort results and the expert-sorted intermediate buffers. Leased for a
// call; more than kScratchKeepBytes is given back when the call returns (scratch.h).
struct CallScratch final : ThreadScratch {
  std::vector<int32_t> ids;         // the caller's topk_ids, read once: validated and used
  std::vector<int64_t> offs;        // (e + 1) row offsets per expert
  std::vector<int32_t> row_token;   // sorted row -> token
  std::vector<int32_t> slot_row;    // t * topk + j -> sorted row
  std::vector<int64_t> tasks;       // packed (expert, tile)
  std::vector<int64_t> fill;
  std::vector<int64_t> abase;       // per expert: byte offset of its packed A chunks
  std::vector<int64_t> chunks;      // packed (expert, chunk) pack tasks
  ScratchBuffer apack;              // every expert's rows, packed once per stage
  ScratchBuffer act;                // (rows, I) bf16
  ScratchBuffer y;                  // (rows, Hp) fp32
  size_t bytes() const override {
    return vector_bytes(ids) + vector_bytes(offs) + vector_bytes(row_token) +
           vector_bytes(slot_row) + vector_bytes(tasks) + vector_bytes(fill) +
           vector_bytes(abase) + vector_bytes(chunks) + apack.capacity() + act.capacity() +
           y.capacity();
  }
  void release() override {
    shrink_vector(ids), shrink_vector(offs), shrink_vector(row_token), shrink_vector(slot_row);
    shrink_vector(tasks), shrink_vector(fill), shrink_vector(abase), shrink_vector(chunks);
    apack.release(), act.release(), y.release();
  }
};
// Per worker thread: the C tile (leased per task).
struct TaskScratch final : ThreadScratch {
  ScratchBuffer c;
  size_t bytes() const override { return c.capacity(); }
  void release() override { c.release(); }
};

TaskScratch& task_scratch() {
  static thread_local TaskScratch s;
  return s;
}

struct Tiling {
  int64_t mc;     // rows per A chunk
  int64_t cols;   // output columns per task (multiple of nr)
};

// A chunk of rows plus a tile of `weight_rows_per_col` * cols weight rows in about half of L2.
Tiling choose_tiling(const Ukernel& uk, int64_t k, int64_t max_rows, int64_t out_cols,
                     int weight_rows_per_col, int64_t active_experts, int threads) {
  const int64_t half_l2 = std::max<int64_t>(cpu_info().l2_bytes / 2, 64 << 10);
  const int64_t a_row = std::max<int64_t>(1, uk.packed_a_size(uk.mr, k) / uk.mr);
  int64_t mc = std::max<int64_t>(uk.mr, std::min<int64_t>(256, half_l2 / 2 / a_row));
  mc = mc / uk.mr * uk.mr;
  const int64_t m_eff = std::min(mc, round_up(max_rows, uk.mr));
  const int64_t a_bytes = uk.packed_a_size(m_eff, k);
  const int64_t panel = uk.packed_size(uk.nr, k);  // bytes of one panel (any format)
  const int64_t budget = std::max(half_l2 - a_bytes, half_l2 / 4);
  int64_t panels = std::max<int64_t>(1, budget / (panel * weight_rows_per_col));
  int64_t cols = panels * uk.nr;
  const int64_t max_cols = round_up(out_cols, uk.nr);
  cols = std::min(cols, max_cols);
  // Enough tasks to keep every thread busy (tiling never changes the results): >= 4 per thread
  // in all, and >= 2 per thread per expert, so that threads split each expert's weight stream
  // evenly (decode: a few experts, each streamed once). Smaller tiles re-read no weights.
  auto tiles = [&](int64_t c) { return (out_cols + c - 1) / c; };
  while (cols > uk.nr && (active_experts * tiles(cols) < 4 * int64_t(threads) ||
                          tiles(cols) < 2 * int64_t(threads)))
    cols = std::max<int64_t>(uk.nr, round_up(cols / 2, uk.nr));
  return {mc, cols};
}

// Packs every expert's rows once per stage, in chunks of mc rows, so that the (expert, tile)
// tasks that share them do not each repack (and, for stage 1, re-gather) the same rows.
// Chunk c of expert x lies at abase[x] + c * chunk_bytes(mc, k).
int64_t chunk_bytes(const Ukernel& uk, int64_t m, int64_t k) {
  return round_up(uk.packed_a_size(m, k), 64);
}

void pack_rows(const Ukernel& uk, int64_t e, const std::vector<int64_t>& offs, int64_t mc,
               int64_t k, const bf16_t* src, int64_t lda, const int32_t* rows, int nthreads,
               std::vector<int64_t>& abase, std::vector<int64_t>& chunks, ScratchBuffer& apack) {
  abase.assign(size_t(e), 0);
  chunks.clear();
  const int64_t full = chunk_bytes(uk, mc, k);
  int64_t total = 0;
  for (int64_t x = 0; x < e; ++x) {
    abase[x] = total;
    const int64_t m = offs[x + 1] - offs[x];
    if (m == 0) continue;
    const int64_t n = (m + mc - 1) / mc;
    for (int64_t c = 0; c < n; ++c) chunks.push_back(x << 32 | c);
    total += (n - 1) * full + chunk_bytes(uk, m - (n - 1) * mc, k);
  }
  apack.reserve(size_t(total));
  char* dst = apack.data<char>();
  parallel_for(int64_t(chunks.size()), nthreads, [&](int64_t i) {
    const int64_t x = chunks[i] >> 32, c = chunks[i] & 0xffffffff;
    const int64_t r0 = offs[x] + c * mc, m = std::min(mc, offs[x + 1] - r0);
    if (rows)
      uk.pack_a(src, lda, rows + r0, m, k, dst + abase[x] + c * full);
    else
      uk.pack_a(src + r0 * lda, lda, nullptr, m, k, dst + abase[x] + c * full);
  });
}

}  // namespace

namespace {

// fused_moe's scratch on this thread (one for both id types).
CallScratch& call_scratch() {
  static thread_local CallScratch scratch;
  return scratch;
}

// The caller's ids, read once each (another thread changing topk_ids during the call cannot
// change what was checked), range-checked in their own type, then kept as int32.
template <class Id>
void read_ids(const Id* src, int64_t slots, int64_t e, std::vector<int32_t>& ids) {
  ids.resize(size_t(slots));
  for (int64_t s = 0; s < slots; ++s) {
    const Id id = __atomic_load_n(src + s, __ATOMIC_RELAXED);
    if (id < 0 || id >= e)
      throw_arg("topk_ids", "expert ids must be in [0, " + std::to_string(e) + "), got " +
                                std::to_string(id) + " at position " + std::to_string(s));
    ids[size_t(s)] = int32_t(id);
  }
}

// Every argument that does not depend on the token count: the two packings against each
// other and x's hidden size (the topk checks follow, after the thread count).
void check_weights(int64_t t, int64_t h, const PackedExperts& w13, const PackedExperts& w2) {
  check_arg(t >= 0, "x", "number of tokens must be >= 0, got " + std::to_string(t));
  check_arg(h >= 1, "x", "hidden size must be >= 1, got " + std::to_string(h));
  check_arg(w13.variant != nullptr && w13.ukernel != nullptr && w13.packed() != nullptr, "w13",
            "not packed weights");
  check_arg(w2.variant != nullptr && w2.ukernel != nullptr && w2.packed() != nullptr, "w2",
            "not packed weights");
  check_arg(w13.isa == w2.isa, "w2",
            "packings of different variants cannot be mixed (w13 is '" + w13.isa + "', w2 is '" +
                w2.isa + "'): prepare both with the same variant");
  check_arg(w2.e == w13.e, "w2",
            "expected " + std::to_string(w13.e) + " experts like w13, got " + std::to_string(w2.e));
  check_arg(w13.i == h, "w13",
            "in-features must equal x's hidden size " + std::to_string(h) + ", got " +
                std::to_string(w13.i));
  check_arg(w2.o == h, "w2",
            "out-features must equal x's hidden size " + std::to_string(h) + ", got " +
                std::to_string(w2.o));
  check_arg(w13.o == 2 * w2.i, "w13",
            "out-features must be 2 * w2's in-features (" + std::to_string(2 * w2.i) + "), got " +
                std::to_string(w13.o));
}

// The buffers of a call with t >= 1 tokens: sizes, null pointers, and out disjoint from every
// input.
template <class Id>
void check_buffers(const bf16_t* x, int64_t t, int64_t h, const PackedExperts& w13,
                   const PackedExperts& w2, const float* topk_weights, const Id* topk_ids,
                   int64_t slots, const bf16_t* w13_bias, const bf16_t* w2_bias,
                   bool skip_weighted, const bf16_t* out) {
  const int64_t e = w13.e;
  checked_mul(t, h, "x");
  check_arg(slots <= INT32_MAX, "topk_ids", "too many (token, expert) pairs");
  check_arg(x != nullptr, "x", "null pointer");
  check_arg(out != nullptr, "out", "null pointer");
  check_arg(topk_ids != nullptr, "topk_ids", "null pointer");
  check_arg(skip_weighted || topk_weights != nullptr, "topk_weights", "null pointer");
  check_disjoint(out, t * h * 2, "out",
                 {{x, t * h * 2, "x"},
                  {topk_weights, slots * 4, "topk_weights"},
                  {topk_ids, slots * int64_t(sizeof(Id)), "topk_ids"},
                  {w13_bias, e * w13.o * 2, "w13_bias"},
                  {w2_bias, e * w2.o * 2, "w2_bias"}});
  w13.check_disjoint_from(out, t * h * 2, "out", "w13");
  w2.check_disjoint_from(out, t * h * 2, "out", "w2");
}

// What the three stages share: the call's sizes, its (token, slot) pairs sorted by expert
// (in the caller's scratch `cs`) and the expert-sorted intermediate buffers.
struct Routed {
  CallScratch& cs;  // offs, row_token, slot_row; tasks, pack buffers
  const int32_t* ids;
  int64_t e, t, topk, slots, h, i, hp;
  int nthreads;
  int64_t active = 0, max_rows = 0;  // experts with rows; most rows of one expert
  bf16_t* act = nullptr;  // (slots, i) bf16: stage 1 -> stage 2
  float* y = nullptr;     // (slots, hp) fp32: stage 2 -> stage 3
};

// Counting sort of (token, slot) by expert, stable: cs.offs (e + 1 row offsets), row_token
// (sorted row -> token), slot_row (t * topk + j -> sorted row); r.active and r.max_rows.
void sort_by_expert(Routed& r) {
  CallScratch& cs = r.cs;
  cs.offs.assign(size_t(r.e + 1), 0);
  for (int64_t s = 0; s < r.slots; ++s) ++cs.offs[size_t(r.ids[s]) + 1];
  for (int64_t x = 0; x < r.e; ++x) {
    r.active += cs.offs[x + 1] > 0;
    r.max_rows = std::max(r.max_rows, cs.offs[x + 1]);
    cs.offs[x + 1] += cs.offs[x];
  }
  cs.row_token.resize(size_t(r.slots));
  cs.slot_row.resize(size_t(r.slots));
  cs.fill.assign(cs.offs.begin(), cs.offs.end() - 1);
  for (int64_t s = 0; s < r.slots; ++s) {
    const int64_t row = cs.fill[r.ids[s]]++;
    cs.row_token[row] = int32_t(s / r.topk);
    cs.slot_row[s] = int32_t(row);
  }
}

// cs.tasks = (expert, tile) for every expert with rows and every tile of `tile` columns of
// cols_total; returns the tiles per expert.
int64_t make_tasks(const Routed& r, int64_t cols_total, int64_t tile) {
  CallScratch& cs = r.cs;
  cs.tasks.clear();
  const int64_t ntiles = (cols_total + tile - 1) / tile;
  for (int64_t x = 0; x < r.e; ++x)
    if (cs.offs[x + 1] > cs.offs[x])
      for (int64_t j = 0; j < ntiles; ++j) cs.tasks.push_back(x * ntiles + j);
  return ntiles;
}

// Stage 1: (expert, tile of I) tasks: gate+up GEMM of the expert's rows, bias, activation ->
// r.act (bf16).
void gate_up_stage(const Routed& r, const Ukernel& uk, const PackedExperts& w13,
                   const bf16_t* x, const bf16_t* w13_bias, Activation activation) {
  CallScratch& cs = r.cs;
  const int64_t H = r.h, I = r.i, nr = uk.nr;
  const bool interleaved = activation == Activation::kSwigluOai;
  const Tiling tl = choose_tiling(uk, H, r.max_rows, I, 2, r.active, r.nthreads);
  const int64_t jt = tl.cols;  // intermediate columns per task (multiple of nr)
  const int64_t ntiles = make_tasks(r, I, jt);
  // C scratch: gate part, then (concatenated layout) up part, same ldc.
  const int64_t ldc = interleaved ? round_up(2 * jt, nr) : jt + nr;
  pack_rows(uk, r.e, cs.offs, tl.mc, H, x, H, cs.row_token.data(), r.nthreads, cs.abase,
            cs.chunks, cs.apack);
  const int64_t full = chunk_bytes(uk, tl.mc, H);
  const int64_t w13_per = uk.packed_size(w13.o, w13.i);
  parallel_for(int64_t(cs.tasks.size()), r.nthreads, [&](int64_t task) {
    const int64_t ex = cs.tasks[task] / ntiles, j0 = (cs.tasks[task] % ntiles) * jt;
    const int64_t j1 = std::min(I, j0 + jt), n = j1 - j0;
    const char* w = w13.packed() + ex * w13_per;
    const bf16_t* bias = w13_bias ? w13_bias + ex * 2 * I : nullptr;
    TaskScratch& ts = task_scratch();
    ThreadScratch::Lease task_lease(ts);
    ts.c.reserve(size_t(tl.mc * ldc * (interleaved ? 1 : 2)) * 4);
    float* cg = ts.c.data<float>();
    float* cu = cg + tl.mc * ldc;
    for (int64_t r0 = cs.offs[ex]; r0 < cs.offs[ex + 1]; r0 += tl.mc) {
      const int64_t m = std::min(tl.mc, cs.offs[ex + 1] - r0);
      const char* ap = cs.apack.data<char>() + cs.abase[ex] + (r0 - cs.offs[ex]) / tl.mc * full;
      if (interleaved) {
        uk.gemm(ap, m, H, w, 2 * j0 / nr, (2 * j1 + nr - 1) / nr, cg, ldc, false);
        uk.activation(activation, m, n, cg, nullptr, ldc, true, bias ? bias + 2 * j0 : nullptr,
                      nullptr, r.act + r0 * I + j0, I);
      } else {
        uk.gemm(ap, m, H, w, j0 / nr, (j1 + nr - 1) / nr, cg, ldc, false);
        const int64_t pu0 = (I + j0) / nr, pu1 = (I + j1 + nr - 1) / nr;
        uk.gemm(ap, m, H, w, pu0, pu1, cu, ldc, false);
        uk.activation(activation, m, n, cg, cu + (I + j0 - pu0 * nr), ldc, false,
                      bias ? bias + j0 : nullptr, bias ? bias + I + j0 : nullptr,
                      r.act + r0 * I + j0, I);
      }
    }
  });
}

// Stage 2: (expert, tile of H) tasks: down GEMM of r.act -> r.y (fp32, expert-sorted rows,
// ldc = hp).
void down_stage(const Routed& r, const Ukernel& uk2, const PackedExperts& w2) {
  CallScratch& cs = r.cs;
  const int64_t H = r.h, I = r.i, nr2 = uk2.nr;
  const Tiling tl = choose_tiling(uk2, I, r.max_rows, H, 1, r.active, r.nthreads);
  const int64_t ht = tl.cols;
  const int64_t ntiles = make_tasks(r, H, ht);
  pack_rows(uk2, r.e, cs.offs, tl.mc, I, r.act, I, nullptr, r.nthreads, cs.abase, cs.chunks,
            cs.apack);
  const int64_t full = chunk_bytes(uk2, tl.mc, I);
  const int64_t w2_per = uk2.packed_size(w2.o, w2.i);
  parallel_for(int64_t(cs.tasks.size()), r.nthreads, [&](int64_t task) {
    const int64_t ex = cs.tasks[task] / ntiles, c0 = (cs.tasks[task] % ntiles) * ht;
    const int64_t c1 = std::min(H, c0 + ht);
    const char* w = w2.packed() + ex * w2_per;
    for (int64_t r0 = cs.offs[ex]; r0 < cs.offs[ex + 1]; r0 += tl.mc) {
      const int64_t m = std::min(tl.mc, cs.offs[ex + 1] - r0);
      const char* ap = cs.apack.data<char>() + cs.abase[ex] + (r0 - cs.offs[ex]) / tl.mc * full;
      uk2.gemm(ap, m, I, w, c0 / nr2, (c1 + nr2 - 1) / nr2, r.y + r0 * r.hp + c0, r.hp, false);
    }
  });
}

// Stage 3: blocks of tokens: out[t] = sum_j w[t,j] * (y[row(t,j)] + b2), slots in order.
void combine_stage(const Routed& r, const float* topk_weights, const bf16_t* w2_bias,
                   bool skip_weighted, bf16_t* out) {
  const int64_t H = r.h, tb = 16;
  parallel_for((r.t + tb - 1) / tb, r.nthreads, [&](int64_t blk) {
    TaskScratch& ts = task_scratch();
    ThreadScratch::Lease task_lease(ts);
    ts.c.reserve(size_t(H) * 4);
    float* acc = ts.c.data<float>();
    for (int64_t tok = blk * tb; tok < std::min(r.t, (blk + 1) * tb); ++tok) {
      std::fill(acc, acc + H, 0.0f);
      for (int64_t j = 0; j < r.topk; ++j) {
        const int64_t s = tok * r.topk + j;
        const float wt = skip_weighted ? 1.0f : topk_weights[s];
        const float* yr = r.y + int64_t(r.cs.slot_row[s]) * r.hp;
        if (w2_bias) {
          const bf16_t* b = w2_bias + int64_t(r.ids[s]) * H;
          for (int64_t c = 0; c < H; ++c) acc[c] += wt * (yr[c] + bf16_to_f32(b[c]));
        } else {
          for (int64_t c = 0; c < H; ++c) acc[c] += wt * yr[c];
        }
      }
      bf16_t* o = out + tok * H;
      for (int64_t c = 0; c < H; ++c) o[c] = f32_to_bf16(acc[c]);
    }
  });
}

template <class Id>
void fused_moe_ids(const bf16_t* x, int64_t t, int64_t h, const PackedExperts& w13,
                   const PackedExperts& w2, const float* topk_weights, const Id* topk_ids,
                   int64_t topk, Activation activation, const bf16_t* w13_bias,
                   const bf16_t* w2_bias, bool skip_weighted, int threads, bf16_t* out) {
  // ---- validation, before any output is written ----
  check_weights(t, h, w13, w2);
  const int64_t nthreads = limits::resolve_threads(threads);
  const int64_t e = w13.e;
  check_arg(topk >= 1 && topk <= e, "topk",
            "must be in [1, " + std::to_string(e) + "], got " + std::to_string(topk));
  check_arg(!skip_weighted || topk == 1, "skip_weighted",
            "requires topk == 1, got topk=" + std::to_string(topk));
  if (t == 0) return;
  const int64_t slots = checked_mul(t, topk, "topk_ids");
  check_buffers(x, t, h, w13, w2, topk_weights, topk_ids, slots, w13_bias, w2_bias,
                skip_weighted, out);
  // The ids are read once, into this thread's scratch: the copy is validated and used
  // (another thread changing topk_ids during the call cannot index out of bounds).
  CallScratch& cs = call_scratch();
  ThreadScratch::Lease lease(cs);
  read_ids(topk_ids, slots, e, cs.ids);

  // Each stage runs the ukernel of its weights' format (formats may differ; each stage packs
  // A its own way), or its tile GEMM when the call has enough rows per expert (ukernel.h).
  const Ukernel& uk = ukernel_for_call(*w13.ukernel, slots, e);
  const Ukernel& uk2 = ukernel_for_call(*w2.ukernel, slots, e);
  Routed r{cs, cs.ids.data(), e, t, topk, slots, h, w2.i, round_up(h, uk2.nr), int(nthreads)};
  sort_by_expert(r);
  cs.act.reserve(size_t(checked_mul(slots, r.i, "x")) * 2);
  cs.y.reserve(size_t(checked_mul(slots, r.hp, "x")) * 4);
  r.act = cs.act.data<bf16_t>();
  r.y = cs.y.data<float>();
  gate_up_stage(r, uk, w13, x, w13_bias, activation);
  down_stage(r, uk2, w2);
  combine_stage(r, topk_weights, w2_bias, skip_weighted, out);
}

}  // namespace

void fused_moe(const bf16_t* x, int64_t t, int64_t h, const PackedExperts& w13,
               const PackedExperts& w2, const float* topk_weights, const int32_t* topk_ids,
               int64_t topk, Activation activation, const bf16_t* w13_bias,
               const bf16_t* w2_bias, bool skip_weighted, int threads, bf16_t* out) {
  fused_moe_ids(x, t, h, w13, w2, topk_weights, topk_ids, topk, activation, w13_bias, w2_bias,
                skip_weighted, threads, out);
}

void fused_moe_int64_ids(const bf16_t* x, int64_t t, int64_t h, const PackedExperts& w13,
                         const PackedExperts& w2, const float* topk_weights,
                         const int64_t* topk_ids, int64_t topk, Activation activation,
                         const bf16_t* w13_bias, const bf16_t* w2_bias, bool skip_weighted,
                         int threads, bf16_t* out) {
  fused_moe_ids(x, t, h, w13, w2, topk_weights, topk_ids, topk, activation, w13_bias, w2_bias,
                skip_weighted, threads, out);
}

void linear(const bf16_t* x, int64_t t, int64_t k, const PackedExperts& w, const bf16_t* bias,
            int threads, bf16_t* out) {
  check_arg(t >= 0, "x", "number of rows must be >= 0, got " + std::to_string(t));
  check_arg(w.variant != nullptr && w.ukernel != nullptr && w.packed() != nullptr, "w",
            "not packed weights");
  check_arg(w.e == 1, "w",
            "expected one matrix packed as E = 1, got E = " + std::to_string(w.e));
  check_arg(w.i == k, "x",
            "in-features must equal w's " + std::to_string(w.i) + ", got " + std::to_string(k));
  const int64_t nthreads = limits::resolve_threads(threads);
  if (t == 0) return;
  checked_mul(t, k, "x");
  checked_mul(t, w.o, "out");
  check_arg(x != nullptr, "x", "null pointer");
  check_arg(out != nullptr, "out", "null pointer");
  check_disjoint(out, t * w.o * 2, "out",
                 {{x, t * k * 2, "x"},
                  {bias, w.o * 2, "bias"}});
  w.check_disjoint_from(out, t * w.o * 2, "out", "w");
  const Ukernel& uk = ukernel_for_call(*w.ukernel, t, 1);
  const int64_t n = w.o, nr = uk.nr;
  static thread_local CallScratch scratch;
  CallScratch& cs = scratch;
  ThreadScratch::Lease lease(cs);
  const Tiling tl = choose_tiling(uk, k, t, n, 1, 1, int(nthreads));
  cs.offs.assign({0, t});
  pack_rows(uk, 1, cs.offs, tl.mc, k, x, k, nullptr, int(nthreads), cs.abase, cs.chunks,
            cs.apack);
  const int64_t full = chunk_bytes(uk, tl.mc, k), ntiles = (n + tl.cols - 1) / tl.cols;
  const char* wd = w.packed();
  parallel_for(ntiles, int(nthreads), [&](int64_t tile) {
    const int64_t c0 = tile * tl.cols, c1 = std::min(n, c0 + tl.cols), ldc = tl.cols;
    TaskScratch& ts = task_scratch();
    ThreadScratch::Lease task_lease(ts);
    ts.c.reserve(size_t(tl.mc * ldc) * 4);
    float* c = ts.c.data<float>();
    for (int64_t r0 = 0; r0 < t; r0 += tl.mc) {
      const int64_t m = std::min(tl.mc, t - r0);
      const char* ap = cs.apack.data<char>() + r0 / tl.mc * full;
      uk.gemm(ap, m, k, wd, c0 / nr, (c1 + nr - 1) / nr, c, ldc, false);
      for (int64_t r = 0; r < m; ++r) {
        const float* cr = c + r * ldc;
        bf16_t* o = out + (r0 + r) * n + c0;
        if (bias)
          for (int64_t j = 0; j < c1 - c0; ++j) o[j] = f32_to_bf16(cr[j] + bf16_to_f32(bias[c0 + j]));
        else
          for (int64_t j = 0; j < c1 - c0; ++j) o[j] = f32_to_bf16(cr[j]);
      }
    }
  });
}

}  // namespace cpukern::moe
