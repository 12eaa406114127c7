// Ternary GEMV benchmarks, registered from the registry (the kernel list): every row this CPU runs,
// fp32 and int8 modes, real layer shapes (M x K), batch 1/4/16, 1 thread and all threads.
// Counters: Gweights/s (M*K*B per second) and GB/s of the prepared bytes the mode reads.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <tuple>
#include <utility>
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
  const double bytes = double(act == Act::kF32 ? v->ukernel.f32.packed_size(sh.m, sh.k)
                                               : v->ukernel.i8.packed_size(sh.m, sh.k));
  state.counters["Gweights/s"] =
      benchmark::Counter(double(sh.m) * double(sh.k) * double(batch) * iters * 1e-9,
                         benchmark::Counter::kIsRate);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * iters * 1e-9, benchmark::Counter::kIsRate);
}

const bool registered = [] {
  const int all = get_num_threads();
  for (const Variant& row : registry().variants()) {
    if (!row.supported()) continue;
    const Variant* v = &row;
    for (const Shape& sh : kShapes)
      for (Act act : {Act::kF32, Act::kInt8})
        for (int64_t batch : {1, 4, 16})
          for (int threads : {1, all}) {
            if (threads == all && all == 1 && threads != 1) continue;
            // Registered shape-major within a variant, so that consecutive
            // benchmarks share one prepared copy of the weights (make_weights).
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
