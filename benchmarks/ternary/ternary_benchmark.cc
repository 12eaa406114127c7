// Ternary GEMV benchmarks, registered from the registry table: every variant this CPU runs,
// fp32 and int8 modes, real layer shapes (M x K), batch 1/4/16, 1 thread and all threads.
// Counters: Gweights/s (M*K*B per second) and GB/s of the prepared bytes the mode reads.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

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

std::shared_ptr<const PreparedWeights> make_weights(const Variant& v, int64_t m, int64_t k) {
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
  std::vector<float> scale(size_t(m), 0.5f);
  return prepare(p.data(), m, words, k, scale.data(), v.name);
}

void run_bench(benchmark::State& state, const Variant* v, Shape sh, int64_t batch, Act act,
               int threads) {
  const auto w = make_weights(*v, sh.m, sh.k);
  std::vector<float> x(size_t(batch * sh.k)), y(size_t(batch * sh.m));
  std::mt19937 rng(3);
  for (auto& e : x) e = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  for (auto _ : state) {
    gemv(*w, x.data(), batch, nullptr, 0, act, threads, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = double(state.iterations());
  const int64_t off = i8_offset(*v, sh.m, sh.k);
  const double bytes = act == Act::kF32 ? double(off) : double(w->nbytes() - off);
  state.counters["Gweights/s"] =
      benchmark::Counter(double(sh.m) * double(sh.k) * double(batch) * iters * 1e-9,
                         benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * iters * 1e-9, benchmark::Counter::kIsRate);
}

const bool registered = [] {
  const int all = get_num_threads();
  for (const auto& base : registry().variants()) {
    if (!base.supported()) continue;
    const Variant* v = &select_variant(base.name);
    for (Act act : {Act::kF32, Act::kInt8})
      for (const Shape& sh : kShapes)
        for (int64_t batch : {1, 4, 16})
          for (int threads : {1, all}) {
            if (threads == all && all == 1 && threads != 1) continue;
            const std::string name = std::string(v->name) + "/" +
                                     (act == Act::kF32 ? "fp32" : "int8") + "/" +
                                     std::to_string(sh.m) + "x" + std::to_string(sh.k) + "/B" +
                                     std::to_string(batch) + "/T" + std::to_string(threads);
            auto* b = benchmark::RegisterBenchmark(name.c_str(), run_bench, v, sh, batch, act,
                                                   threads);
            b->UseRealTime()->Unit(benchmark::kMicrosecond);
            if (v->ukernel.name == std::string("ternary_gemv_f32_t2p16_1x1__scalar"))
              b->MinTime(0.05);
            if (all == 1) break;
          }
  }
  return true;
}();

}  // namespace
}  // namespace cpukern::ternary
