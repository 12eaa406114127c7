// The ternary GEMV driver, written once for every variant: validation, weight preparation
// (each layout by its best packer; the int8 layout at first use), activation preparation
// (fp32 tables or int8 quantisation), row tiling over the thread pool, and the scale epilogue.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/thread_pool.h"
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

}  // namespace

std::shared_ptr<const PreparedWeights> prepare_variant(const Variant& v, const uint32_t* packed,
                                                       int64_t m, int64_t k, const float* scale) {
  auto p = std::make_shared<PreparedWeights>();
  p->variant = &v;
  p->isa = v.name;
  p->m = m;
  p->k = k;
  if (scale) p->scale.assign(scale, scale + m);
  p->data.resize(size_t(v.ukernel.f32.packed_size(m, k)));
  if (m > 0 && k > 0) packer_for(v.ukernel.f32.layout).pack(packed, m, k, p->data.data());
  return p;
}

const void* PreparedWeights::i8_data() const {
  std::call_once(i8_once_, [this] {
    const F32Ukernel& f = variant->ukernel.f32;
    const I8Ukernel& q = variant->ukernel.i8;
    if (std::strcmp(f.layout, q.layout) == 0) {  // one layout serves both modes
      i8_ptr_ = data.data();
      return;
    }
    i8_buf_.resize(size_t(q.packed_size(m, k)));
    if (m > 0 && k > 0) {
      // The public words are restored from the fp32 layout (the caller's copy may be gone).
      const Packer& from = packer_for(f.layout);
      if (!from.unpack) throw std::logic_error(std::string(from.name) + " has no unpack");
      std::vector<uint32_t> words(size_t(m * words_for(k)));
      from.unpack(data.data(), m, k, words.data());
      packer_for(q.layout).pack(words.data(), m, k, i8_buf_.data());
    }
    i8_ptr_ = i8_buf_.data();
    i8_bytes_ = int64_t(i8_buf_.size());
  });
  return i8_ptr_;
}

std::shared_ptr<const PreparedWeights> prepare(const uint32_t* packed, int64_t m, int64_t words,
                                               int64_t k, const float* scale,
                                               const std::string& isa) {
  check_arg(m >= 0, "packed", "rows must be >= 0, got " + s(m));
  check_arg(k >= 0, "k", "must be >= 0, got " + s(k));
  check_arg(k <= limits::kMaxElements, "k", "expected k <= 2**46, got " + s(k));
  check_arg(words == words_for(k), "packed",
            "expected ceil(k/16) = " + s(words_for(k)) + " words per row for k = " + s(k) +
                ", got " + s(words));
  checked_mul(m, words * 16, "packed");
  check_arg(packed != nullptr || m * words == 0, "packed", "must not be null");
  const Variant& v = registry().select(isa);  // throws naming "isa"
  // The caller's words are read once: the copy is validated and packed (another thread
  // writing 0b11 codes into `packed` during the call cannot reach the kernels' layouts).
  std::vector<uint32_t> copy(packed, packed + m * words);
  packed = copy.data();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t wi = 0; wi < words; ++wi) {
      const uint32_t word = packed[r * words + wi];
      if (const uint32_t bad = ternary_codes::invalid_codes(word)) {
        const int c = __builtin_ctz(bad) / 2;
        throw_arg("packed", "invalid code 0b11 for weight [" + s(r) + ", " + s(wi * 16 + c) +
                                "] (word [" + s(r) + ", " + s(wi) + "])");
      }
      const int valid = int(std::min<int64_t>(16, k - wi * 16));
      if (const uint32_t past = word & ternary_codes::past_mask(valid)) {
        const int c = __builtin_ctz(past) / 2;
        throw_arg("packed", "nonzero code past k = " + s(k) + " for column " + s(wi * 16 + c) +
                                " of row " + s(r) + " (word [" + s(r) + ", " + s(wi) + "])");
      }
    }
  return prepare_variant(v, packed, m, k, scale);
}

void scale_epilogue_f32(float* y, int64_t batch, int64_t m, const float* scale,
                        int64_t scale_len) {
  if (scale_len == 0) return;
  for (int64_t b = 0; b < batch; ++b) {
    float* yb = y + b * m;
    if (scale_len == 1) {
      for (int64_t r = 0; r < m; ++r) yb[r] *= scale[0];
    } else {
      for (int64_t r = 0; r < m; ++r) yb[r] *= scale[r];
    }
  }
}

void scale_epilogue_i8(const int32_t* acc, const float* dq, int64_t batch, int64_t m,
                       const float* scale, int64_t scale_len, float* y) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < m; ++r) {
      const float s = scale_len == 0 ? 1.0f : scale_len == 1 ? scale[0] : scale[r];
      y[b * m + r] = float(acc[b * m + r]) * dq[b] * s;
    }
}

void gemv(const PreparedWeights& w, const float* x, int64_t batch, const float* scale,
          int64_t scale_len, Act act, int threads, float* y) {
  check_arg(w.variant != nullptr, "w", "weights were not prepared");
  const Variant& v = *w.variant;
  const int64_t m = w.m, k = w.k;
  check_arg(batch >= 0, "batch", "must be >= 0, got " + s(batch));
  checked_mul(batch, std::max<int64_t>(k, 1), "batch");
  checked_mul(batch, std::max<int64_t>(m, 1), "batch");
  check_arg(x != nullptr || batch * k == 0, "x", "must not be null");
  check_arg(y != nullptr || batch * m == 0, "y", "must not be null");
  check_arg(scale_len == 0 || scale_len == 1 || scale_len == m, "scale",
            "expected length 0, 1 or m = " + s(m) + ", got " + s(scale_len));
  check_arg(scale != nullptr || scale_len == 0, "scale", "must not be null when scale_len > 0");
  check_arg(act == Act::kF32 || act == Act::kInt8, "act", "expected fp32 or int8");
  // int8 mode: |acc| = |sum_k w q| <= 127 * K must be exact in the int32 accumulators.
  constexpr int64_t kMaxInt8K = INT32_MAX / 127;
  check_arg(act != Act::kInt8 || k <= kMaxInt8K, "act",
            "int8 mode needs K <= " + s(kMaxInt8K) + " (127 * K must fit int32), got K = " + s(k) +
                "; use act='fp32'");
  const int nthreads = limits::resolve_threads(threads);
  if (scale_len == 0 && !w.scale.empty()) {
    scale = w.scale.data();
    scale_len = m;
  }
  if (batch == 0 || m == 0) return;

  if (act == Act::kInt8) {
    // Validate (x finite) before anything is written.
    for (int64_t i = 0; i < batch * k; ++i)
      if (!std::isfinite(x[i]))
        throw_arg("x", "must be finite in int8 mode, got " + std::to_string(x[i]) +
                           " at index [" + s(i / k) + ", " + s(i % k) + "]");
    const I8Ukernel& uk = v.ukernel.i8;
    const int64_t stride = i8_kpad(k);
    AlignedBuffer& qb = scratch(0);
    AlignedBuffer& ab = scratch(1);
    AlignedBuffer& db = scratch(2);
    qb.reserve(size_t(batch * stride));
    ab.reserve(size_t(batch * m * 4));
    db.reserve(size_t(batch * 12));
    int8_t* xq = qb.data<int8_t>();
    int32_t* acc = ab.data<int32_t>();
    float* dq = db.data<float>();
    int32_t* xsum = reinterpret_cast<int32_t*>(dq + batch);
    float* post = reinterpret_cast<float*>(xsum + batch);
    for (int64_t b = 0; b < batch; ++b) {
      const float* xb = x + b * k;
      float amax = 0.0f;
      for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(xb[j]));
      // A row with max|x| < 2**-100 (127 / max|x| overflows below ~3.7e-37, max|x| / 127 is
      // subnormal) is quantised as x * 2**64 (exact) and its results are scaled by 2**-64:
      // the same q, a normal dq. Other rows: pre = post = 1 (bitwise the plain formula).
      const bool tiny = amax > 0.0f && amax < 0x1p-100f;
      const float pre = tiny ? 0x1p64f : 1.0f;
      post[b] = tiny ? 0x1p-64f : 1.0f;
      amax *= pre;
      const float qs = amax > 0 ? 127.0f / amax : 0.0f;
      dq[b] = amax / 127.0f;
      int8_t* q = xq + b * stride;
      int32_t sum = 0;
      for (int64_t j = 0; j < k; ++j) {
        const float t = std::nearbyint((xb[j] * pre) * qs);
        q[j] = int8_t(std::min(127.0f, std::max(-127.0f, t)));
        sum += q[j];
      }
      std::memset(q + k, 0, size_t(stride - k));
      xsum[b] = sum;
    }
    if (k == 0) {
      std::memset(acc, 0, size_t(batch * m * 4));
    } else {
      const int64_t rpt = rows_per_task(m, uk.mr, nthreads);
      const char* wbase = static_cast<const char*>(w.i8_data());
      const int64_t rb = uk.row_bytes(k);
      parallel_for((m + rpt - 1) / rpt, nthreads, [&](int64_t t) {
        const int64_t r0 = t * rpt, r1 = std::min(m, r0 + rpt);
        I8Args a{wbase + r0 * rb, r1 - r0, k, xq, stride, xsum, batch, acc + r0, m};
        uk.run(&a);
      });
    }
    scale_epilogue_i8(acc, dq, batch, m, scale, scale_len, y);
    for (int64_t b = 0; b < batch; ++b)
      if (post[b] != 1.0f)
        for (int64_t r = 0; r < m; ++r) y[b * m + r] *= post[b];
    return;
  }

  const F32Ukernel& uk = v.ukernel.f32;
  if (k == 0) {
    std::fill(y, y + batch * m, 0.0f);
  } else {
    const F32Geometry geo = uk.geometry(m, k);
    AlignedBuffer& xb = scratch(0);
    xb.reserve(size_t(batch * geo.x_bytes));
    char* xp = xb.data<char>();
    for (int64_t b = 0; b < batch; ++b) uk.xprep(x + b * k, &geo, xp + b * geo.x_bytes);
    const int64_t rpt = rows_per_task(m, uk.mr, nthreads);
    const char* wbase = w.data.data<char>();
    parallel_for((m + rpt - 1) / rpt, nthreads, [&](int64_t t) {
      const int64_t r0 = t * rpt, r1 = std::min(m, r0 + rpt);
      F32Args a{wbase + (r0 / uk.mr) * geo.tile_bytes, r1 - r0, xp, batch, y + r0, m, &geo};
      uk.run(&a);
    });
  }
  scale_epilogue_f32(y, batch, m, scale, scale_len);
}

}  // namespace cpukern::ternary
