// Group scales: one scale per row and group of G consecutive columns (G = 256 for GGUF
// TQ1_0/TQ2_0; any multiple of 16), for every variant, on top of its own micro-kernels.
//
// The weights are stored as one sub-layout per (row block, group): each is the whole
// (rows, G) matrix in the micro-kernel's own layout. Blocks come in row order and, inside a
// block, groups in column order, so a task (one block) reads one contiguous stream. gemv runs
// the micro-kernel on each sub-layout into raw partial sums (multiplication-free as before)
// and adds scale * partial in group order: one multiply per row and group, and a row's result
// never depends on the thread count or the batch.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/ternary/ukernel.h"

namespace cpukern::ternary::grouped {

// Rows per block: a multiple of every micro-kernel's mr (1, 4, 8, 16).
inline constexpr int64_t kBlockRows = 128;

// Where each (block, group) sub-layout of one layout lives.
class Plan {
 public:
  // size(rows, cols): the layout's packed_size.
  Plan(int64_t m, int64_t k, int64_t g, int64_t (*size)(int64_t rows, int64_t cols));
  int64_t blocks() const { return blocks_; }
  int64_t groups() const { return groups_; }
  int64_t rows(int64_t b) const { return std::min(kBlockRows, m_ - b * kBlockRows); }
  int64_t cols(int64_t gi) const { return std::min(g_, k_ - gi * g_); }
  int64_t offset(int64_t b, int64_t gi) const {
    return b * block_bytes_ + (b + 1 == blocks_ ? last_ : full_)[size_t(gi)];
  }
  int64_t bytes() const { return blocks_ == 0 ? 0 : (blocks_ - 1) * block_bytes_ + last_.back(); }

 private:
  int64_t m_, k_, g_, blocks_, groups_;
  int64_t block_bytes_ = 0;         // bytes of a full block
  std::vector<int64_t> full_, last_;  // offsets inside a full / the last block (groups + 1)
};

// Public words (m, words_for(k)) -> the grouped layout (plan.bytes(), zeroed), by `packer`.
void pack(const Plan& plan, const Packer& packer, const uint32_t* words, int64_t k, int threads,
          void* dst);
// The inverse (the int8 layout is packed lazily from the fp32 one).
void unpack(const Plan& plan, const Packer& packer, const void* src, int64_t k, uint32_t* words);

// y[b, r] = sum_g scale[r, g] * sum_{j in g} w[r, j] x[b, j], g in order; the scaled group
// sums are added in double (exact products) and rounded to fp32 once, times 2**exps[b] for a
// row the driver pre-scaled (exps may be null: none).
void gemv_f32(const PreparedWeights& w, const F32Ukernel& uk, const float* x, const int* exps,
              int64_t batch, int threads, float* y);
// int8 mode from the driver's quantised activations (q rows of `stride`, zero-padded; dq and
// post as in the driver): y[b, r] = float((sum_g scale[r, g] * acc_g[b, r]) * dq[b] * post[b])
// in double.
void gemv_i8(const PreparedWeights& w, const I8Ukernel& uk, const int8_t* xq, int64_t stride,
             const float* dq, const float* post, int64_t batch, int threads, float* y);

}  // namespace cpukern::ternary::grouped
