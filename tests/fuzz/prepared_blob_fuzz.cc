// libFuzzer target: the import of untrusted prepared-weight blobs (kernels/common/prepared_blob.h)
// by all three ops, ternary::from_buffer, widely_linear::from_buffer and moe::from_buffer, with
// verify on and off and with re-preparing allowed or not, then one call of the op on what the
// import accepted. Seeds (corpus/prepared_blob/) are real blobs of every op and format.
//
// Checks, besides the sanitizers (ASan + UBSan): an import either throws
// std::invalid_argument (cpukern::InvalidArgument) or returns weights whose shapes agree with
// the header, which the op then runs on without reading out of bounds; any other exception,
// crash or sanitizer report is a finding. With verify=true, an accepted blob must be accepted
// without verify too (verify only ever refuses more).
//
// Input: [0] flags (bit 0 verify, bit 1 allow re-prepare, bits 2-3 importer when the header
// names no op, bit 4 threads 2), then the blob (copied to a 64-byte aligned buffer).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/bf16.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/moe/moe.h"
#include "kernels/ternary/ternary.h"
#include "kernels/widely_linear/widely_linear.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "prepared_blob_fuzz: %s\n", what);
  std::abort();
}

// Work sizes past which the run after an accepted import is skipped (the fuzzer's time goes to
// parsing, not to big GEMVs); the import itself is always exercised.
constexpr int64_t kMaxWork = int64_t(1) << 22;

void run_ternary(const cpukern::ternary::PreparedWeights& w, int threads) {
  if (w.k > (1 << 16) || w.m * std::max<int64_t>(w.k, 1) > kMaxWork) return;
  std::vector<float> x(size_t(2 * w.k)), y(size_t(2 * w.m));
  for (size_t j = 0; j < x.size(); ++j) x[j] = float(int(j % 7) - 3);
  cpukern::ternary::gemv(w, x.data(), 2, nullptr, 0, cpukern::ternary::Act::kF32, threads,
                         y.data());
  cpukern::ternary::gemv(w, x.data(), 2, nullptr, 0, cpukern::ternary::Act::kInt8, threads,
                         y.data());
}

void run_widely_linear(const cpukern::widely_linear::PreparedLayer& l, int threads) {
  if (l.m > (1 << 16) || l.stages * l.n * l.m > kMaxWork) return;
  std::vector<float> x(size_t(2 * 2 * l.m)), y(size_t(2 * 2 * l.n));
  for (size_t j = 0; j < x.size(); ++j) x[j] = float(int(j % 5) - 2);
  for (bool fused : {true, false})
    cpukern::widely_linear::run(l, x.data(), 2, fused, threads, y.data());
}

// The blob as w13 (e, 2I, H) with a zero bf16 w2 (e, H, I) of the same variant, or as w2 with a
// zero w13; shapes that fit neither (odd o for w13 ...) still run as w2.
void run_moe(const cpukern::moe::PackedExperts& w, int threads) {
  using namespace cpukern::moe;
  if (w.e * w.o * w.i > kMaxWork || w.e > 64) return;
  const bool as_w13 = w.o % 2 == 0;
  const int64_t h = as_w13 ? w.i : w.o, inter = as_w13 ? w.o / 2 : w.i;
  std::vector<cpukern::bf16_t> other(size_t(w.e * h * inter * 2), 0);
  std::shared_ptr<const PackedExperts> partner;
  try {
    partner = as_w13 ? prepare(other.data(), w.e, h, inter, w.isa)
                     : prepare(other.data(), w.e, 2 * inter, h, w.isa);
  } catch (const std::invalid_argument&) {
    return;  // a shape the bf16 packer refuses (e.g. a dimension too large)
  }
  const int64_t t = 3, topk = 1;
  std::vector<cpukern::bf16_t> x(size_t(t * h)), out(size_t(t * h));
  for (size_t j = 0; j < x.size(); ++j) x[j] = cpukern::f32_to_bf16(float(int(j % 5) - 2) * 0.5f);
  std::vector<float> tw(size_t(t * topk), 1.0f);
  std::vector<int32_t> ids(size_t(t * topk));
  for (int64_t j = 0; j < t; ++j) ids[size_t(j)] = int32_t(j % w.e);
  try {
    fused_moe(x.data(), t, h, as_w13 ? w : *partner, as_w13 ? *partner : w, tw.data(),
              ids.data(), topk, Activation::kSwigluOai, nullptr, nullptr, false, threads,
              out.data());
  } catch (const std::invalid_argument&) {
    // shapes fused_moe refuses (e.g. I not matching between the two); the import was fine
  }
}

enum Op { kTernary, kWidelyLinear, kMoe };

// Imports the blob with the given options; true when accepted (and then runs the op).
bool import(Op op, const unsigned char* buf, int64_t size, std::shared_ptr<const void> owner,
            bool verify, bool reprepare, int threads, bool run) {
  try {
    switch (op) {
      case kTernary: {
        cpukern::ternary::ImportOptions o;
        o.verify = verify, o.allow_reprepare = reprepare, o.threads = threads;
        auto w = cpukern::ternary::from_buffer(buf, size, owner, o);
        if (!w || w->m < 0 || w->k < 0) fail("ternary import returned bad weights");
        if (run) run_ternary(*w, threads);
        return true;
      }
      case kWidelyLinear: {
        cpukern::widely_linear::ImportOptions o;
        o.verify = verify, o.allow_reprepare = reprepare, o.threads = threads;
        auto l = cpukern::widely_linear::from_buffer(buf, size, owner, o);
        if (!l || l->n < 1 || l->m < 1 || l->stages < 1) fail("widely_linear import returned bad layer");
        if (run) run_widely_linear(*l, threads);
        return true;
      }
      default: {
        cpukern::moe::ImportOptions o;
        o.verify = verify, o.allow_reprepare = reprepare, o.threads = threads;
        auto w = cpukern::moe::from_buffer(buf, size, owner, o);
        if (!w || w->e < 1 || w->o < 1 || w->i < 1) fail("moe import returned bad experts");
        if (run) run_moe(*w, threads);
        return true;
      }
    }
  } catch (const std::invalid_argument&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  const bool verify = flags & 1, reprepare = flags & 2;
  const int threads = flags & 16 ? 2 : 1;
  const int64_t n = int64_t(size - 1);
  auto buf = std::make_shared<cpukern::AlignedBuffer>(size_t(std::max<int64_t>(n, 1)));
  if (n) std::memcpy(buf->data(), data + 1, size_t(n));
  const auto* b = buf->data<unsigned char>();
  Op op = Op((flags >> 2) % 3);
  if (n >= 32) {  // the header's op name (offset 16) picks the importer it is meant for
    const std::string name(reinterpret_cast<const char*>(b) + 16,
                           strnlen(reinterpret_cast<const char*>(b) + 16, 16));
    if (name == "ternary") op = kTernary;
    if (name == "widely_linear") op = kWidelyLinear;
    if (name == "moe") op = kMoe;
  }
  const bool ok = import(op, b, n, buf, verify, reprepare, threads, true);
  if (ok && verify && !import(op, b, n, buf, false, reprepare, threads, false))
    fail("accepted with verify, refused without");
  return 0;
}
