// Group scales for every variant (see grouped.h).
#include "kernels/ternary/grouped.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/thread_pool.h"

namespace cpukern::ternary::grouped {
namespace {

int64_t align64(int64_t n) { return (n + 63) / 64 * 64; }

// Offsets of each group's sub-layout in a block of `rows` rows (64-byte aligned: the
// micro-kernels load whole cache lines).
std::vector<int64_t> block_offsets(int64_t rows, int64_t k, int64_t g, int64_t groups,
                                   int64_t (*size)(int64_t, int64_t)) {
  std::vector<int64_t> off(size_t(groups) + 1, 0);
  for (int64_t gi = 0; gi < groups; ++gi)
    off[size_t(gi) + 1] = off[size_t(gi)] + align64(size(rows, std::min(g, k - gi * g)));
  return off;
}

}  // namespace

Plan::Plan(int64_t m, int64_t k, int64_t g, int64_t (*size)(int64_t, int64_t))
    : m_(m), k_(k), g_(g), blocks_((m + kBlockRows - 1) / kBlockRows), groups_((k + g - 1) / g) {
  if (blocks_ == 0 || groups_ == 0) {
    blocks_ = groups_ = 0;
    last_.assign(1, 0);
    return;
  }
  full_ = block_offsets(kBlockRows, k, g, groups_, size);
  block_bytes_ = full_.back();
  last_ = block_offsets(rows(blocks_ - 1), k, g, groups_, size);
}

void pack(const Plan& plan, const Packer& packer, const uint32_t* words, int64_t k, int threads,
          void* dst) {
  const int64_t row_words = words_for(k);
  parallel_for(plan.blocks(), threads, [&](int64_t b) {
    const int64_t rows = plan.rows(b);
    std::vector<uint32_t> slice;
    for (int64_t gi = 0; gi < plan.groups(); ++gi) {
      const int64_t cols = plan.cols(gi), gw = words_for(cols);
      const int64_t first = gi * (plan.cols(0) / 16);  // G is a multiple of 16: whole words
      slice.resize(size_t(rows * gw));
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(&slice[size_t(r * gw)], words + (b * kBlockRows + r) * row_words + first,
                    size_t(gw) * 4);
      packer.pack(slice.data(), rows, cols, static_cast<char*>(dst) + plan.offset(b, gi));
    }
  });
}

void unpack(const Plan& plan, const Packer& packer, const void* src, int64_t k, uint32_t* words) {
  const int64_t row_words = words_for(k);
  std::vector<uint32_t> slice;
  for (int64_t b = 0; b < plan.blocks(); ++b) {
    const int64_t rows = plan.rows(b);
    for (int64_t gi = 0; gi < plan.groups(); ++gi) {
      const int64_t cols = plan.cols(gi), gw = words_for(cols);
      const int64_t first = gi * (plan.cols(0) / 16);
      slice.assign(size_t(rows * gw), 0);
      packer.unpack(static_cast<const char*>(src) + plan.offset(b, gi), rows, cols, slice.data());
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(words + (b * kBlockRows + r) * row_words + first, &slice[size_t(r * gw)],
                    size_t(gw) * 4);
    }
  }
}

namespace {

// sum[b, r] (+)= double(s[r]) * partial[b, r] for rows [0, rows) of a block (the first group
// sets): each product is exact in double, and no sum overflows.
// s: the group's scales of these rows, contiguous (PreparedWeights keeps them group-major).
template <class T>
void add_scaled(const T* partial, int64_t ldp, const float* s, bool first, int64_t rows,
                int64_t batch, double* sum) {
  for (int64_t b = 0; b < batch; ++b) {
    double* sb = sum + b * ldp;
    const T* pb = partial + b * ldp;
    if (first) {
      for (int64_t r = 0; r < rows; ++r) sb[r] = double(s[r]) * double(pb[r]);
    } else {
      for (int64_t r = 0; r < rows; ++r) sb[r] += double(s[r]) * double(pb[r]);
    }
  }
}

// y rows [r0, r0 + rows) = float(sum[b, r] * f[b]): the one fp32 rounding.
void store(const double* sum, int64_t lds, const double* f, int64_t rows, int64_t batch,
           int64_t m, float* y) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r) y[b * m + r] = float(sum[b * lds + r] * f[b]);
}

}  // namespace

void gemv_f32(const PreparedWeights& w, const F32Ukernel& uk, const float* x, const int* exps,
              int64_t batch, int threads, float* y) {
  const int64_t m = w.m, k = w.k;
  const Plan plan(m, k, w.group_size, uk.packed_size);
  const int64_t groups = plan.groups();
  // Prepared activations: group-major, batch rows of each group's x_bytes.
  std::vector<F32Geometry> geo(static_cast<size_t>(groups));
  std::vector<int64_t> xoff(size_t(groups) + 1, 0);
  for (int64_t gi = 0; gi < groups; ++gi) {
    geo[size_t(gi)] = uk.geometry(kBlockRows, plan.cols(gi));
    xoff[size_t(gi) + 1] = xoff[size_t(gi)] + batch * geo[size_t(gi)].x_bytes;
  }
  std::vector<double> f(static_cast<size_t>(batch), 1.0);  // 2**e of pre-scaled rows
  if (exps)
    for (int64_t b = 0; b < batch; ++b) f[size_t(b)] = std::ldexp(1.0, exps[b]);
  AlignedBuffer xp(size_t(xoff.back()));
  for (int64_t gi = 0; gi < groups; ++gi)
    for (int64_t b = 0; b < batch; ++b)
      uk.xprep(x + b * k + gi * w.group_size, &geo[size_t(gi)],
               xp.data<char>() + xoff[size_t(gi)] + b * geo[size_t(gi)].x_bytes);
  const char* base = static_cast<const char*>(w.layout());
  parallel_for(plan.blocks(), threads, [&](int64_t blk) {
    const int64_t r0 = blk * kBlockRows, rows = plan.rows(blk);
    std::vector<float> partial(size_t(batch * kBlockRows));
    std::vector<double> sum(size_t(batch * kBlockRows));
    for (int64_t gi = 0; gi < groups; ++gi) {
      F32Args a{base + plan.offset(blk, gi), rows, xp.data<char>() + xoff[size_t(gi)], batch,
                partial.data(), kBlockRows, &geo[size_t(gi)]};
      uk.run(&a);
      add_scaled(partial.data(), kBlockRows, w.scales() + gi * m + r0, gi == 0, rows, batch,
                 sum.data());
    }
    store(sum.data(), kBlockRows, f.data(), rows, batch, m, y + r0);
  });
}

void gemv_i8(const PreparedWeights& w, const I8Ukernel& uk, const int8_t* xq, int64_t stride,
             const float* dq, const float* post, int64_t batch, int threads, float* y) {
  const int64_t m = w.m, k = w.k, g = w.group_size;
  const Plan plan(m, k, g, uk.packed_size);
  const int64_t groups = plan.groups();
  // Each group's activations zero-padded on their own (the micro-kernels read whole
  // i8_kpad blocks), group-major, with their own sums. A group is at most k columns (G may
  // exceed k).
  const int64_t kp = i8_kpad(std::min(g, k));
  AlignedBuffer qg(size_t(groups * batch * kp));
  std::vector<int32_t> sums(size_t(groups * batch));
  for (int64_t gi = 0; gi < groups; ++gi)
    for (int64_t b = 0; b < batch; ++b) {
      const int8_t* src = xq + b * stride + gi * g;
      int8_t* dst = qg.data<int8_t>() + (gi * batch + b) * kp;
      int32_t sum = 0;
      for (int64_t j = 0; j < plan.cols(gi); ++j) sum += dst[j] = src[j];
      sums[size_t(gi * batch + b)] = sum;
    }
  std::vector<double> f(static_cast<size_t>(batch));  // dq * post, exact in double
  for (int64_t b = 0; b < batch; ++b) f[size_t(b)] = double(dq[b]) * double(post[b]);
  const char* base = static_cast<const char*>(w.i8_data(threads));
  parallel_for(plan.blocks(), threads, [&](int64_t blk) {
    const int64_t r0 = blk * kBlockRows, rows = plan.rows(blk);
    std::vector<int32_t> acc(size_t(batch * kBlockRows));
    std::vector<double> sum(size_t(batch * kBlockRows));
    for (int64_t gi = 0; gi < groups; ++gi) {
      I8Args a{base + plan.offset(blk, gi), rows, plan.cols(gi),
               qg.data<int8_t>() + gi * batch * kp, kp, &sums[size_t(gi * batch)], batch,
               acc.data(), kBlockRows};
      uk.run(&a);
      add_scaled(acc.data(), kBlockRows, w.scales() + gi * m + r0, gi == 0, rows, batch,
                 sum.data());
    }
    store(sum.data(), kBlockRows, f.data(), rows, batch, m, y + r0);
  });
}

}  // namespace cpukern::ternary::grouped
