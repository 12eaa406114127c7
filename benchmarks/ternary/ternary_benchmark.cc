// Ternary GEMV benchmarks, registered from the registry (the kernel list): every row this CPU runs,
// fp32 and int8 modes, real layer shapes (M x K), batch 1/4/16, 1 thread and all threads; plus
// BitNet b1.58 2B-4T's decode layers at batch 1 in fp32 and int8_bitnet (its decode's mode),
// and at prefill batches 64 and 512 in int8_bitnet.
// Every name ends in /hot or /cold:
//   hot:  the same prepared weights every call (cached where they fit in the L3);
//   cold: calls rotate over distinct prepared copies spanning >= 3x the L3 (sysfs), so every
//         call streams its weights from memory (B=1 and B=16, and the 32768x14336 layer).
// Counters: Gweights/s (M*K*B per second), GB/s of the prepared bytes the mode reads, and
// of_probe = that GB/s over the all-core streaming-read probe (benchmarks/bandwidth).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/common/machine.h"
#include "kernels/common/thread_pool.h"
#include "kernels/ternary/ternary.h"
#include "kernels/ternary/ukernel.h"

namespace cpukern::ternary {
namespace {

struct Shape {
  int64_t m, k;
};
const Shape kShapes[] = {{4096, 4096},  {1024, 4096}, {14336, 4096}, {4096, 14336},
                         {3840, 2560},  {2560, 2560}, {13824, 2560}, {2560, 6912}};

// The packed weights of one shape (random, one third each of -1, 0, +1), made once.
const std::vector<uint32_t>& packed_weights(int64_t m, int64_t k) {
  static std::map<std::pair<int64_t, int64_t>, std::vector<uint32_t>> cache;
  auto it = cache.find({m, k});
  if (it != cache.end()) return it->second;
  std::mt19937 rng(7);
  std::vector<uint32_t> p(size_t(m * words_for(k)));
  const int64_t words = words_for(k);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t w = 0; w < words; ++w) {
      uint32_t word = 0;
      for (int64_t s = 0; s < 16 && w * 16 + s < k; ++s) {
        const uint32_t c = rng() % 3;  // 0: zero, 1: -1, 2: +1
        word |= c << (2 * s);
      }
      p[size_t(r * words + w)] = word;
    }
  return cache.emplace(std::make_pair(m, k), std::move(p)).first->second;
}

// The prepared weights of the last (variant, shape) asked for: consecutive benchmarks and
// repetitions of one (variant, shape) reuse them; one copy lives at a time.
std::shared_ptr<const PreparedWeights> make_weights(const Variant& v, int64_t m, int64_t k) {
  static std::tuple<const Variant*, int64_t, int64_t> key;
  static std::shared_ptr<const PreparedWeights> last;
  if (!last || key != std::make_tuple(&v, m, k)) {
    last.reset();
    std::vector<float> scale(size_t(m), 0.5f);
    last = prepare(packed_weights(m, k).data(), m, words_for(k), k, scale.data(), v.name);
    last->i8_data();  // the int8 layout is packed at first use: not inside a timed loop
    key = std::make_tuple(&v, m, k);
  }
  return last;
}

// The cold rotation of (variant, shape): bench::cold_sets copies, one rotation alive at a time.
const std::vector<std::shared_ptr<const PreparedWeights>>& cold_weights(const Variant& v,
                                                                       int64_t m, int64_t k) {
  static std::tuple<const Variant*, int64_t, int64_t> key;
  static std::vector<std::shared_ptr<const PreparedWeights>> sets;
  if (sets.empty() || key != std::make_tuple(&v, m, k)) {
    sets.clear();
    const int64_t bytes = int64_t(std::min(v.ukernel.f32.packed_size(m, k),
                                           v.ukernel.i8.packed_size(m, k)));
    const int n = bench::cold_sets(bytes);
    std::vector<float> scale(size_t(m), 0.5f);
    for (int i = 0; i < n; ++i) {
      sets.push_back(prepare(packed_weights(m, k).data(), m, words_for(k), k, scale.data(), v.name));
      sets.back()->i8_data();
    }
    key = std::make_tuple(&v, m, k);
  }
  return sets;
}

void run_bench(benchmark::State& state, const Variant* v, Shape sh, int64_t batch, Act act,
               int threads, bool cold) {
  std::vector<std::shared_ptr<const PreparedWeights>> ws;
  if (cold)
    ws = cold_weights(*v, sh.m, sh.k);
  else
    ws = {make_weights(*v, sh.m, sh.k)};
  std::vector<float> x(size_t(batch * sh.k)), y(size_t(batch * sh.m));
  std::mt19937 rng(3);
  for (auto& e : x) e = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  size_t next = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    gemv(*ws[next], x.data(), batch, nullptr, 0, act, threads, y.data());
    if (++next == ws.size()) next = 0;
    benchmark::DoNotOptimize(y.data());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double iters = double(state.iterations());
  const double bytes = double(act == Act::kF32 ? v->ukernel.f32.packed_size(sh.m, sh.k)
                                               : v->ukernel.i8.packed_size(sh.m, sh.k));
  state.counters["Gweights/s"] =
      benchmark::Counter(double(sh.m) * double(sh.k) * double(batch) * iters * 1e-9,
                         benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * iters * 1e-9, benchmark::Counter::kIsRate);
  state.counters["of_probe"] =
      bytes * iters / seconds / bench::probe_bytes_per_s(bench::all_cores());
  state.counters["sets"] = double(ws.size());
}

// Cold rows: the weights of these calls come from memory (B=1 decode, B=16 small batch), plus
// a layer too big for any L3 (32768x14336, a 128k-vocabulary head shape).
const Shape kColdShapes[] = {{4096, 14336}, {14336, 4096}, {32768, 14336}};

// BitNet b1.58 2B-4T's decode layers (q/o, k/v, gate/up, down), batch 1, hot and cold, in the
// modes its decode runs: fp32 and act="int8_bitnet" (per-token int8, BitNet's rule).
const Shape kBitNetShapes[] = {{2560, 2560}, {640, 2560}, {6912, 2560}, {2560, 6912}};

// Prefill: BitNet's layers at prompt-sized batches in its prefill mode (int8_bitnet), hot:
// the int8 kernels' fraction of the machine's int8 peak (//benchmarks/peak).
const int64_t kPrefillBatches[] = {64, 512};

// Small batches (speculative decoding, batched serving): BitNet's layers at B = 2, 4, 8 in
// both decode modes, cold, beside the batch-1 rows above (the weight pass they share).
const int64_t kSmallBatches[] = {2, 4, 8};

// A call with almost no work (two 64-row tasks): its time is the driver's and the thread
// pool's per-call cost (all threads against 1: the wake-up and the barrier).
const Shape kDispatchShape = {128, 256};

const bool registered = [] {
  bench::add_machine_context();
  const int all = get_num_threads();
  auto add = [&](const Variant* v, Shape sh, Act act, int64_t batch, int threads, bool cold) {
    const char* mode = act == Act::kF32 ? "fp32" : act == Act::kInt8 ? "int8" : "int8_bitnet";
    const std::string name = std::string(v->name) + "/" + mode +
                             "/" + std::to_string(sh.m) + "x" + std::to_string(sh.k) + "/B" +
                             std::to_string(batch) + "/T" + std::to_string(threads) +
                             (cold ? "/cold" : "/hot");
    auto* b = benchmark::RegisterBenchmark(name.c_str(), run_bench, v, sh, batch, act, threads,
                                           cold);
    b->UseRealTime()->Unit(benchmark::kMicrosecond);
    if (v->ukernel.name == std::string("ternary_gemv_f32_f32_t2p16_1x1__scalar")) b->MinTime(0.05);
  };
  for (const Variant& row : registry().all_rows()) {
    if (!row.supported()) continue;
    const Variant* v = &row;
    // Registered shape-major within a variant, so that consecutive benchmarks share one
    // prepared copy (make_weights) or one cold rotation (cold_weights) of the weights.
    for (const Shape& sh : kShapes)
      for (Act act : {Act::kF32, Act::kInt8})
        for (int64_t batch : {1, 4, 16})
          for (int threads : {1, all}) {
            add(v, sh, act, batch, threads, false);
            if (all == 1) break;
          }
    const bool scalar = v->ukernel.name == std::string("ternary_gemv_f32_f32_t2p16_1x1__scalar");
    for (const Shape& sh : kColdShapes) {
      if (scalar && sh.m > 4096 * 4) continue;  // minutes per call set: the hot rows suffice
      for (Act act : {Act::kF32, Act::kInt8})
        for (int64_t batch : {1, 16})
          for (int threads : {1, all}) {
            add(v, sh, act, batch, threads, true);
            if (all == 1) break;
          }
    }
    for (const Shape& sh : kBitNetShapes)
      for (Act act : {Act::kF32, Act::kInt8BitNet})
        for (bool cold : {false, true})
          for (int threads : {1, all}) {
            add(v, sh, act, 1, threads, cold);
            if (all == 1) break;
          }
    if (!scalar)
      for (const Shape& sh : kBitNetShapes)
        for (Act act : {Act::kF32, Act::kInt8BitNet})
          for (int64_t batch : kSmallBatches)
            for (int threads : {1, all}) {
              add(v, sh, act, batch, threads, true);
              if (all == 1) break;
            }
    for (int threads : {1, all}) {
      add(v, kDispatchShape, Act::kInt8BitNet, 1, threads, false);
      if (all == 1) break;
    }
    if (!scalar)
      for (const Shape& sh : kBitNetShapes)
        for (int64_t batch : kPrefillBatches)
          for (int threads : {1, all}) {
            add(v, sh, Act::kInt8BitNet, batch, threads, false);
            if (all == 1) break;
          }
  }
  return true;
}();

}  // namespace
}  // namespace cpukern::ternary
