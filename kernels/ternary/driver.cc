// The ternary GEMV driver, written once for every variant: validation, weight preparation
// (each layout by its best packer; the int8 layout at first use), activation preparation
// (fp32 tables or int8 quantisation), row tiling over the thread pool, and the scale epilogue.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/prescale.h"
#include "kernels/common/thread_pool.h"
#include "kernels/ternary/act_bitnet.h"
#include "kernels/ternary/grouped.h"
#include "kernels/ternary/ternary.h"
#include "kernels/ternary/ukernel.h"

namespace cpukern::ternary {
namespace {

std::string s(int64_t v) { return std::to_string(v); }

// Rows per task: whole tiles, about 8 tasks per thread so that the atomic task counter
// balances the load (the machines are shared: a thread that loses its core leaves its
// tasks to the others); a row's result never depends on the split. Tasks are multiples of
// 8 tiles once they are that large (the blocked kernels' widest tile group, 128 rows for
// the 16-row fp32 kernels), else of 2 tiles, and at least 64 rows of work.
int64_t rows_per_task(int64_t m, int mr, int threads) {
  const int64_t tiles = (m + mr - 1) / mr;
  int64_t per = (tiles + int64_t(threads) * 8 - 1) / (int64_t(threads) * 8);
  per = std::max<int64_t>(per, (64 + mr - 1) / mr);
  per = per >= 8 ? (per + 7) / 8 * 8 : std::max<int64_t>(2, (per + 1) / 2 * 2);
  return per * mr;
}

AlignedBuffer& scratch(int i) {
  thread_local AlignedBuffer buf[3];
  return buf[i];
}

// ---- prepare ------------------------------------------------------------------------------
// Rows are prepared in tasks of whole tiles on the thread pool: a task copies its rows of
// public words (about kPrepareChunkBytes, so the copy and the layout it packs stay in L2),
// validates the copy and packs it. Every layout places a row at a position fixed by (m, k),
// so the bytes do not depend on the split or the thread count.
constexpr int64_t kPrepareChunkBytes = int64_t(128) << 10;

int64_t prepare_rows_per_task(int64_t words, int64_t tile) {
  const int64_t rows = kPrepareChunkBytes / std::max<int64_t>(1, words * 4);
  return std::max<int64_t>(1, rows / tile) * tile;
}

// A task's copy of its rows (per thread, reused; one much larger than a chunk, for very long
// rows, is given back after the task).
class ChunkCopy {
 public:
  explicit ChunkCopy(int64_t n) : buf_(buffer()) {
    if (int64_t(buf_.size()) < n) buf_.resize(size_t(n));
  }
  ~ChunkCopy() {
    if (int64_t(buf_.size()) * 4 > 4 * kPrepareChunkBytes) std::vector<uint32_t>().swap(buf_);
  }
  uint32_t* data() { return buf_.data(); }

 private:
  static std::vector<uint32_t>& buffer() {
    thread_local std::vector<uint32_t> b;
    return b;
  }
  std::vector<uint32_t>& buf_;
};

}  // namespace

std::shared_ptr<PreparedWeights> new_weights(const Variant& v, int64_t m, int64_t k,
                                             int64_t group_size) {
  auto p = std::make_shared<PreparedWeights>();
  p->variant = &v;
  p->isa = v.name;
  p->ukernel_name = v.ukernel.f32.name;
  p->layout_name = v.ukernel.f32.layout;
  p->m = m;
  p->k = k;
  p->group_size = group_size;
  return p;
}

namespace {

// The fp32 layout and the scales of w (new_weights) into the sections own_section hands out.
void pack_sections(PreparedWeights& w, const uint32_t* packed, const float* scale, int nthreads) {
  const int64_t m = w.m, k = w.k, group_size = w.group_size;
  if (scale && group_size > 0) {  // given (m, groups); kept group-major for the epilogue
    const int64_t groups = groups_for(k, group_size);
    auto* s = static_cast<float*>(w.own_section(PreparedWeights::kScales, 4 * m * groups, true));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t gi = 0; gi < groups; ++gi) s[gi * m + r] = scale[r * groups + gi];
  } else if (scale) {
    auto* s = static_cast<float*>(w.own_section(PreparedWeights::kScales, 4 * m, true));
    std::memcpy(s, scale, size_t(4 * m));
  }
  const F32Ukernel& uk = w.variant->ukernel.f32;
  if (m == 0 || k == 0) {
    w.own_section(PreparedWeights::kF32Layout, uk.packed_size(m, k));
    return;
  }
  if (group_size > 0) {  // one validated copy, then the (block, group) sub-layouts
    const int64_t words = words_for(k);
    std::vector<uint32_t> copy(packed, packed + m * words);
    if (const int64_t i = first_bad_word(copy.data(), m, words, k); i >= 0)
      throw_bad_word(i, copy[size_t(i)], words, k);
    const grouped::Plan plan(m, k, group_size, uk.packed_size);
    // zeroed: the alignment gaps between sub-layouts
    void* dst = w.own_section(PreparedWeights::kF32Layout, plan.bytes());
    grouped::pack(plan, packer_for(uk.layout), copy.data(), k, nthreads, dst);
    return;
  }
  // Packers write every byte of the layout (tested), each task its own rows: no zeroing
  // pass, and the first touch of the pages is spread over the threads.
  char* base = static_cast<char*>(
      w.own_section(PreparedWeights::kF32Layout, uk.packed_size(m, k), true));
  const Packer& packer = packer_for(uk.layout);
  const int64_t words = words_for(k), rpt = prepare_rows_per_task(words, uk.mr);
  const int64_t tasks = (m + rpt - 1) / rpt;
  struct BadWord {
    int64_t index = -1;
    uint32_t word = 0;
  };
  std::vector<BadWord> bad(static_cast<size_t>(tasks));
  parallel_for(tasks, nthreads, [&](int64_t t) {
    const int64_t r0 = t * rpt, n = std::min(m, r0 + rpt) - r0;
    // The caller's words are read once: this copy is validated and packed (another thread
    // writing 0b11 codes into `packed` during the call cannot reach the kernels' layouts).
    ChunkCopy copy(n * words);
    std::memcpy(copy.data(), packed + r0 * words, size_t(n * words * 4));
    if (const int64_t i = first_bad_word(copy.data(), n, words, k); i >= 0) {
      bad[size_t(t)] = {r0 * words + i, copy.data()[i]};
      return;
    }
    packer.pack(copy.data(), n, k, base + uk.packed_size(r0, k));
  });
  for (const BadWord& b : bad)  // the first in row-major order, whatever the thread count
    if (b.index >= 0) throw_bad_word(b.index, b.word, words, k);
}

// The int8 layout of w, whose variant's int8 kernel reads a layout of its own, restored from
// the fp32 layout (the caller's words may be gone) into alloc(bytes, for_overwrite)'s memory:
// the owned buffer of i8_data, or prepare_into's section.
template <class Alloc>
void pack_i8_layout(const PreparedWeights& w, int threads, Alloc alloc) {
  const F32Ukernel& f = w.variant->ukernel.f32;
  const I8Ukernel& q = w.variant->ukernel.i8;
  const int64_t m = w.m, k = w.k;
  if (m == 0 || k == 0) {
    alloc(q.packed_size(m, k), false);
    return;
  }
  const Packer& from = packer_for(f.layout);
  const Packer& to = packer_for(q.layout);
  if (!from.unpack) throw std::logic_error(std::string(from.name) + " has no unpack");
  if (w.group_size > 0) {
    const grouped::Plan fp(m, k, w.group_size, f.packed_size);
    const grouped::Plan qp(m, k, w.group_size, q.packed_size);
    std::vector<uint32_t> words(size_t(m * words_for(k)));
    grouped::unpack(fp, from, w.layout(), k, words.data());
    void* dst = alloc(qp.bytes(), false);  // zeroed: the alignment gaps between sub-layouts
    grouped::pack(qp, to, words.data(), k, limits::resolve_threads(threads), dst);
    return;
  }
  // Task by task (whole tiles of both layouts); every byte is packed.
  char* dst = static_cast<char*>(alloc(q.packed_size(m, k), true));
  const int64_t words = words_for(k);
  const int64_t rpt = prepare_rows_per_task(words, std::lcm<int64_t>(f.mr, q.mr));
  const char* src = static_cast<const char*>(w.layout());
  parallel_for((m + rpt - 1) / rpt, limits::resolve_threads(threads), [&](int64_t t) {
    const int64_t r0 = t * rpt, n = std::min(m, r0 + rpt) - r0;
    ChunkCopy words_of(n * words);
    from.unpack(src + f.packed_size(r0, k), n, k, words_of.data());
    to.pack(words_of.data(), n, k, dst + q.packed_size(r0, k));
  });
}

// What prepare_into serialises besides the asked-for int8 layout: that of empty weights, which
// is ready without packing (i8_ready(); cpukern's to_bytes includes a ready layout).
bool blob_int8(bool with_int8, int64_t m, int64_t k) { return with_int8 || m == 0 || k == 0; }

}  // namespace

std::shared_ptr<const PreparedWeights> prepare_variant(const Variant& v, const uint32_t* packed,
                                                       int64_t m, int64_t k, const float* scale,
                                                       int threads, int64_t group_size,
                                                       const BlobTarget* into, bool with_int8) {
  const int nthreads = limits::resolve_threads(threads);
  auto p = new_weights(v, m, k, group_size);
  if (!into) {
    pack_sections(*p, packed, scale, nthreads);
    return p;
  }
  int64_t sizes[3];
  section_sizes(v, m, k, group_size, scale != nullptr, with_int8, sizes);
  const int64_t nscale = group_size > 0 ? m * groups_for(k, group_size) : m;
  check_disjoint(into->p, into->size, "out",
                 {{packed, m * words_for(k) * 4, "packed"}, {scale, scale ? 4 * nscale : 0, "scale"}});
  p->place_sections(*into, sizes);
  pack_sections(*p, packed, scale, nthreads);
  if (sizes[PreparedWeights::kI8Layout] > 0)
    pack_i8_layout(*p, threads, [&](int64_t bytes, bool for_overwrite) {
      return p->own_section(PreparedWeights::kI8Layout, bytes, for_overwrite);
    });
  p->seal({with_int8, threads});
  return p;
}

bool PreparedWeights::i8_ready() const {
  // i8_bytes_ (atomic, stored after the layout is packed), not i8_ptr_: another thread may be
  // packing it now (serialisation racing the first int8 call).
  return section(kI8Layout) != nullptr || i8_bytes_.load() > 0 || m == 0 || k == 0 ||
         std::strcmp(variant->ukernel.f32.layout, variant->ukernel.i8.layout) == 0;
}

const void* PreparedWeights::i8_data(int threads) const {
  if (const void* viewed = section(kI8Layout)) return viewed;
  std::call_once(i8_once_, [&] {
    if (std::strcmp(variant->ukernel.f32.layout, variant->ukernel.i8.layout) == 0) {
      i8_ptr_ = layout();  // one layout serves both modes
      return;
    }
    pack_i8_layout(*this, threads, [&](int64_t bytes, bool for_overwrite) {
      if (for_overwrite)
        i8_buf_.resize_for_overwrite(size_t(bytes));
      else
        i8_buf_.resize(size_t(bytes));
      return i8_buf_.data();
    });
    i8_ptr_ = i8_buf_.data();
    i8_bytes_ = int64_t(i8_buf_.size());
  });
  return i8_ptr_;
}

namespace {

// prepare's checks of its arguments but the arrays' contents (and `packed` being given).
void check_prepare_args(int64_t m, int64_t words, int64_t k, bool has_scale, int threads,
                        int64_t group_size) {
  check_arg(m >= 0, "packed", "rows must be >= 0, got " + s(m));
  check_arg(k >= 0, "k", "must be >= 0, got " + s(k));
  check_arg(k <= limits::kMaxElements, "k", "expected k <= 2**46, got " + s(k));
  check_arg(words == words_for(k), "packed",
            "expected ceil(k/16) = " + s(words_for(k)) + " words per row for k = " + s(k) +
                ", got " + s(words));
  checked_mul(m, words * 16, "packed");
  limits::resolve_threads(threads);             // throws naming "threads"
  check_arg(group_size == 0 || (group_size >= 16 && group_size % 16 == 0), "group_size",
            "expected a multiple of 16 (or 0: no groups), got " + s(group_size));
  check_arg(group_size == 0 || has_scale || m * k == 0, "scale",
            "expected float32 group scales of shape (" + s(m) + ", " +
                s(groups_for(k, std::max<int64_t>(group_size, 1))) + ") with group_size = " +
                s(group_size) + ", got none");
}

const Variant& checked_row(const uint32_t* packed, int64_t m, int64_t words, int64_t k,
                           const float* scale, const std::string& isa, int threads,
                           int64_t group_size) {
  check_prepare_args(m, words, k, scale != nullptr, threads, group_size);
  check_arg(packed != nullptr || m * words == 0, "packed", "must not be null");
  return registry().select(isa);  // throws naming "variant"
}

}  // namespace

std::shared_ptr<const PreparedWeights> prepare(const uint32_t* packed, int64_t m, int64_t words,
                                               int64_t k, const float* scale,
                                               const std::string& isa, int threads,
                                               int64_t group_size) {
  const Variant& v = checked_row(packed, m, words, k, scale, isa, threads, group_size);
  return prepare_variant(v, packed, m, k, scale, threads, group_size);  // validates the words
}

int64_t prepared_size(int64_t m, int64_t words, int64_t k, bool has_scale, const std::string& isa,
                      int64_t group_size, bool with_int8) {
  check_prepare_args(m, words, k, has_scale, 0, group_size);
  int64_t sizes[3];
  section_sizes(registry().select(isa), m, k, group_size, has_scale, blob_int8(with_int8, m, k),
                sizes);
  return int64_t(blob::plan(sizes, 3).total);
}

std::shared_ptr<const PreparedWeights> prepare_into(const uint32_t* packed, int64_t m,
                                                    int64_t words, int64_t k, const float* scale,
                                                    const std::string& isa, int threads,
                                                    int64_t group_size, bool with_int8,
                                                    const BlobTarget& into) {
  const Variant& v = checked_row(packed, m, words, k, scale, isa, threads, group_size);
  return prepare_variant(v, packed, m, k, scale, threads, group_size, &into,
                         blob_int8(with_int8, m, k));
}

void scale_epilogue_f32(float* y, int64_t batch, int64_t m, const float* scale,
                        int64_t scale_len, const int* exps) {
  for (int64_t b = 0; b < batch; ++b) {
    float* yb = y + b * m;
    if (exps && exps[b] != 0) {  // a pre-scaled row: one rounding of the exact y * s * 2**e
      const double f = std::ldexp(1.0, exps[b]);
      for (int64_t r = 0; r < m; ++r) {
        const double s = scale_len == 0 ? 1.0 : scale_len == 1 ? scale[0] : scale[r];
        yb[r] = float(double(yb[r]) * s * f);
      }
    } else if (scale_len == 1) {
      for (int64_t r = 0; r < m; ++r) yb[r] *= scale[0];
    } else if (scale_len == m) {
      for (int64_t r = 0; r < m; ++r) yb[r] *= scale[r];
    }
  }
}

void scale_epilogue_i8(const int32_t* acc, const float* dq, const float* post, int64_t batch,
                       int64_t m, int64_t r0, int64_t r1, const float* scale, int64_t scale_len,
                       float* y) {
  for (int64_t b = 0; b < batch; ++b) {
    const double d = double(dq[b]), p = double(post[b]);
    const int32_t* ab = acc + b * m;
    float* yb = y + b * m;
    if (scale_len == m) {
      for (int64_t r = r0; r < r1; ++r) yb[r] = float(double(ab[r]) * d * double(scale[r]) * p);
    } else {
      const double s = scale_len == 0 ? 1.0 : double(scale[0]);
      for (int64_t r = r0; r < r1; ++r) yb[r] = float(double(ab[r]) * d * s * p);
    }
  }
}

void check_x_columns(const PreparedWeights& w, int64_t columns, const std::string& got) {
  check_arg(columns == w.k, "x",
            "expected K = " + s(w.k) + " columns to match the weights, got " + got);
}

namespace {

// int8 mode: |acc| = |sum_k w q| <= 127 * K must be exact in the int32 accumulators.
constexpr int64_t kMaxInt8K = INT32_MAX / 127;

// gemv's checks of one call (the weights, x, y, the scale and act), before anything is written.
void check_call(const PreparedWeights& w, const float* x, int64_t batch, const float* scale,
                int64_t scale_len, Act act, const float* y) {
  check_arg(w.variant != nullptr, "w", "weights were not prepared");
  const int64_t m = w.m, k = w.k;
  check_arg(batch >= 0, "batch", "must be >= 0, got " + s(batch));
  checked_mul(batch, std::max<int64_t>(k, 1), "batch");
  checked_mul(batch, std::max<int64_t>(m, 1), "batch");
  check_arg(x != nullptr || batch * k == 0, "x", "must not be null");
  check_arg(y != nullptr || batch * m == 0, "y", "must not be null");
  check_arg(scale_len == 0 || scale_len == 1 || scale_len == m, "scale",
            "expected a float or a float32 array of shape (" + s(m) + ",), got " + s(scale_len) +
                " values");
  check_arg(scale != nullptr || scale_len == 0, "scale", "must not be null when scale_len > 0");
  check_arg(act == Act::kF32 || act == Act::kInt8 || act == Act::kInt8BitNet, "act",
            "expected fp32, int8 or int8_bitnet");
  check_arg(act == Act::kF32 || k <= kMaxInt8K, "act",
            "int8 mode needs K <= " + s(kMaxInt8K) + " (127 * K must fit int32), got K = " + s(k) +
                "; use act='fp32'");
  check_arg(w.group_size == 0 || scale_len == 0, "scale",
            "expected none: the weights carry their group scales (one per row and group of " +
                s(w.group_size) + " columns)");
  check_disjoint(y, batch * m * 4, "out",
                 {{x, batch * k * 4, "x"},
                  {scale, scale_len * 4, "scale"}});
  w.check_disjoint_from(y, batch * m * 4, "out", "weights");
}

// The rows of x quantised to int8 by act's rule (scratch buffers 0 and 2 of this thread).
struct QuantizedX {
  int8_t* q;
  int64_t stride;  // i8_kpad(k)
  float* dq;       // per row: the dequantisation factor
  int32_t* xsum;   // per row: sum of q
  float* post;     // per row: 1, or 2**-64 for a row quantised as x * 2**64
};

// x is validated (finite) before anything is written.
QuantizedX quantize_x(const float* x, int64_t batch, int64_t k, Act act) {
  for (int64_t i = 0; i < batch * k; ++i)
    if (!std::isfinite(x[i]))
      throw_arg("x", "must be finite in int8 mode, got " + std::to_string(x[i]) +
                         " at index [" + s(i / k) + ", " + s(i % k) + "]");
  const int64_t stride = i8_kpad(k);
  AlignedBuffer& qb = scratch(0);
  AlignedBuffer& db = scratch(2);
  qb.reserve(size_t(batch * stride));
  db.reserve(size_t(batch * 12));
  QuantizedX r{qb.data<int8_t>(), stride, db.data<float>(), nullptr, nullptr};
  r.xsum = reinterpret_cast<int32_t*>(r.dq + batch);
  r.post = reinterpret_cast<float*>(r.xsum + batch);
  for (int64_t b = 0; b < batch; ++b) {
    const float* xb = x + b * k;
    int8_t* q = r.q + b * stride;
    if (act == Act::kInt8BitNet) {
      r.xsum[b] = act_bitnet::quantize_row(xb, k, q, &r.dq[b]);
      r.post[b] = 1.0f;
      if (stride > k) std::memset(q + k, 0, size_t(stride - k));
      continue;
    }
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(xb[j]));
    // A row with max|x| < 2**-100 (127 / max|x| overflows below ~3.7e-37, max|x| / 127 is
    // subnormal) is quantised as x * 2**64 (exact) and its results are scaled by 2**-64:
    // the same q, a normal dq. Other rows: pre = post = 1 (bitwise the plain formula).
    const bool tiny = amax > 0.0f && amax < 0x1p-100f;
    const float pre = tiny ? 0x1p64f : 1.0f;
    r.post[b] = tiny ? 0x1p-64f : 1.0f;
    amax *= pre;
    const float qs = amax > 0 ? 127.0f / amax : 0.0f;
    r.dq[b] = amax / 127.0f;
    int32_t sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      const float t = act_bitnet::round_half_even_small((xb[j] * pre) * qs);  // |t| <= 127
      q[j] = int8_t(std::min(127.0f, std::max(-127.0f, t)));
      sum += q[j];
    }
    if (stride > k) std::memset(q + k, 0, size_t(stride - k));  // (k == 0: no buffer at all)
    r.xsum[b] = sum;
  }
  return r;
}

// The prepared scales of w where the call gives none (the epilogues' scale, scale_len).
void default_scale(const PreparedWeights& w, const float*& scale, int64_t& scale_len) {
  if (scale_len == 0 && w.has_scale() && w.group_size == 0) {
    scale = w.scales();
    scale_len = w.m;
  }
}

// One matrix of an int8 call: its weights, the scale its epilogue applies, its output.
struct I8Job {
  const PreparedWeights* w;
  const float* scale;
  int64_t scale_len;
  float* y;
};

// The int8 micro-kernel and epilogue over the rows of every job (K > 0, no group scales), in
// one task list: tasks of rows_per_task rows each, a job's tasks after the previous job's.
// A task's rows and sums do not depend on the other jobs, so each output is bitwise what the
// job alone would give.
void run_i8(const I8Job* jobs, int64_t n, const I8Ukernel& uk, const QuantizedX& xq,
            int64_t batch, int64_t k, int nthreads) {
  std::vector<int64_t> rpt(static_cast<size_t>(n)), first_task(static_cast<size_t>(n) + 1, 0),
      acc_at(static_cast<size_t>(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t m = jobs[i].w->m;
    rpt[i] = rows_per_task(m, uk.mr, nthreads);
    first_task[i + 1] = first_task[i] + (m + rpt[i] - 1) / rpt[i];
    acc_at[i + 1] = acc_at[i] + batch * m;
  }
  AlignedBuffer& ab = scratch(1);
  ab.reserve(size_t(acc_at[n] * 4));
  int32_t* acc_all = ab.data<int32_t>();
  std::vector<const char*> base(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) base[i] = static_cast<const char*>(jobs[i].w->i8_data(nthreads));
  const int64_t rb = uk.row_bytes(k);
  parallel_for(first_task[n], nthreads, [&](int64_t t) {
    int64_t i = 0;
    while (t >= first_task[i + 1]) ++i;
    const I8Job& job = jobs[i];
    const int64_t m = job.w->m, r0 = (t - first_task[i]) * rpt[i], r1 = std::min(m, r0 + rpt[i]);
    int32_t* acc = acc_all + acc_at[i];
    I8Args a{base[i] + r0 * rb, r1 - r0, k, xq.q, xq.stride, xq.xsum, batch, acc + r0, m};
    uk.run(&a);
    scale_epilogue_i8(acc, xq.dq, xq.post, batch, m, r0, r1, job.scale, job.scale_len, job.y);
  });
}

}  // namespace

void gemv(const PreparedWeights& w, const float* x, int64_t batch, const float* scale,
          int64_t scale_len, Act act, int threads, float* y) {
  check_call(w, x, batch, scale, scale_len, act, y);
  const Variant& v = *w.variant;
  const int64_t m = w.m, k = w.k;
  const int nthreads = limits::resolve_threads(threads);
  default_scale(w, scale, scale_len);
  if (batch == 0 || m == 0) return;

  if (act != Act::kF32) {
    const I8Ukernel& uk = v.ukernel.i8;
    const QuantizedX xq = quantize_x(x, batch, k, act);
    if (w.group_size > 0 && k > 0) {
      grouped::gemv_i8(w, uk, xq.q, xq.stride, xq.dq, xq.post, batch, nthreads, y);
      return;
    }
    if (k == 0) {
      AlignedBuffer& ab = scratch(1);
      ab.reserve(size_t(batch * m * 4));
      int32_t* acc = ab.data<int32_t>();
      std::memset(acc, 0, size_t(batch * m * 4));
      scale_epilogue_i8(acc, xq.dq, xq.post, batch, m, 0, m, scale, scale_len, y);
    } else {
      const I8Job job{&w, scale, scale_len, y};
      run_i8(&job, 1, uk, xq, batch, k, nthreads);
    }
    return;
  }

  const F32Ukernel& uk = v.ukernel.f32;
  // Rows with K * max|x| > 2**120 run as x * 2**-e and are scaled back in the epilogue
  // (prescale.h): no partial sum overflows where the exact result is finite.
  const int* exps = nullptr;
  if (k > 0) {
    AlignedBuffer& eb = scratch(1);
    eb.reserve(size_t(batch) * sizeof(int));
    int* e = eb.data<int>();
    bool any = false;
    for (int64_t b = 0; b < batch; ++b) any |= (e[b] = prescale::exponent(x + b * k, k, k)) != 0;
    if (any) {
      AlignedBuffer& sb = scratch(2);
      sb.reserve(size_t(batch * k) * sizeof(float));
      float* xs = sb.data<float>();
      for (int64_t b = 0; b < batch; ++b) prescale::scale_row(x + b * k, k, e[b], xs + b * k);
      x = xs;
      exps = e;
    }
  }
  if (k == 0) {
    std::fill(y, y + batch * m, 0.0f);
  } else if (w.group_size > 0) {
    grouped::gemv_f32(w, uk, x, exps, batch, nthreads, y);
    return;
  } else {
    const F32Geometry geo = uk.geometry(m, k);
    AlignedBuffer& xb = scratch(0);
    xb.reserve(size_t(batch * geo.x_bytes));
    char* xp = xb.data<char>();
    for (int64_t b = 0; b < batch; ++b) uk.xprep(x + b * k, &geo, xp + b * geo.x_bytes);
    const int64_t rpt = rows_per_task(m, uk.mr, nthreads);
    const char* wbase = static_cast<const char*>(w.layout());
    parallel_for((m + rpt - 1) / rpt, nthreads, [&](int64_t t) {
      const int64_t r0 = t * rpt, r1 = std::min(m, r0 + rpt);
      F32Args a{wbase + (r0 / uk.mr) * geo.tile_bytes, r1 - r0, xp, batch, y + r0, m, &geo};
      uk.run(&a);
    });
  }
  scale_epilogue_f32(y, batch, m, scale, scale_len, exps);
}

}  // namespace cpukern::ternary

namespace cpukern::ternary {

void gemv_multi(const PreparedWeights* const* ws, int64_t n, const float* x, int64_t batch,
                Act act, int threads, float* const* ys) {
  check_arg(n >= 1 && ws != nullptr && ys != nullptr, "weights",
            "expected at least one matrix, got " + s(n));
  for (int64_t i = 0; i < n; ++i) {
    check_arg(ws[i] != nullptr, "weights", "matrix " + s(i) + " is null");
    check_arg(ws[i]->k == ws[0]->k, "weights",
              "every matrix must take the same K = " + s(ws[0]->k) + " inputs, matrix " + s(i) +
                  " takes " + s(ws[i]->k));
    check_call(*ws[i], x, batch, nullptr, 0, act, ys[i]);
    for (int64_t j = 0; j < i; ++j)
      check_disjoint(ys[i], batch * ws[i]->m * 4, "out",
                     {{ys[j], batch * ws[j]->m * 4, "another output"}});
    for (int64_t j = 0; j < n; ++j)
      if (j != i) ws[j]->check_disjoint_from(ys[i], batch * ws[i]->m * 4, "out", "weights");
  }
  const int64_t k = ws[0]->k;
  bool shared = act != Act::kF32 && k > 0 && batch > 0;
  for (int64_t i = 0; i < n; ++i)
    shared = shared && ws[i]->variant == ws[0]->variant && ws[i]->group_size == 0;
  if (!shared) {  // nothing to share: the calls one by one (the same results)
    for (int64_t i = 0; i < n; ++i) gemv(*ws[i], x, batch, nullptr, 0, act, threads, ys[i]);
    return;
  }
  const int nthreads = limits::resolve_threads(threads);
  std::vector<I8Job> jobs;
  for (int64_t i = 0; i < n; ++i) {
    I8Job job{ws[i], nullptr, 0, ys[i]};
    default_scale(*ws[i], job.scale, job.scale_len);
    jobs.push_back(job);
  }
  const QuantizedX xq = quantize_x(x, batch, k, act);
  run_i8(jobs.data(), n, ws[0]->variant->ukernel.i8, xq, batch, k, nthreads);
}

}  // namespace cpukern::ternary
