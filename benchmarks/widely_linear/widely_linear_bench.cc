// Google benchmark of the widely-linear layer, registered from the kernel list: every
// variant this CPU supports x layer shapes x stages x batch x threads (1, 2) x
// fused/unfused, prepare() per variant, and every supported packer alone.
// Counter GB/s = bytes of the prepared planes per call / time (the unfused schedule reads
// them twice, so at equal GB/s it is doing twice the memory traffic); of_probe = GB/s over
// the all-core streaming-read probe (benchmarks/bandwidth).
// Layer rows end in /hot (the same prepared layer every call) or /cold (calls rotate over
// distinct prepared copies spanning >= 3x the L3, so the planes come from memory).
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "benchmarks/common/machine.h"
#include "kernels/common/thread_pool.h"
#include "kernels/common/cpu_features.h"
#include "kernels/widely_linear/ukernel.h"
#include "kernels/widely_linear/widely_linear.h"

namespace {

using cpukern::widely_linear::PreparedLayer;

struct Planes {
  std::vector<uint32_t> planes;
  std::vector<float> scales;
};

// Random Fairy2i-like planes: every complex weight is one of +-1, +-i (disjoint supports).
const Planes& planes_for(int64_t n, int64_t m, int64_t S) {
  static std::map<std::tuple<int64_t, int64_t, int64_t>, Planes> cache;
  auto& p = cache[{n, m, S}];
  if (p.planes.empty()) {
    const int64_t words = (m + 15) / 16, pw = n * words;
    p.planes.assign(S * 4 * pw, 0);
    std::mt19937 rng(42);
    for (int64_t s = 0; s < S; ++s)
      for (int t = 0; t < 2; ++t)
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < m; ++c) {
            const uint32_t v = rng() & 3;  // +1, -1, +i, -i
            const int plane = (s * 4 + 2 * t + (v >> 1)) ;
            p.planes[plane * pw + r * words + c / 16] |= (v & 1 ? 1u : 2u) << (2 * (c % 16));
          }
    p.scales.assign(S * 4, 0.02f);
  }
  return p;
}

// Copy `copy` of the prepared layer (cold rows rotate over copies 0..n-1).
std::shared_ptr<const PreparedLayer> layer_for(const std::string& isa, int64_t n, int64_t m,
                                               int64_t S, int copy = 0) {
  static std::map<std::tuple<std::string, int64_t, int64_t, int64_t, int>,
                  std::shared_ptr<const PreparedLayer>>
      cache;
  auto& l = cache[{isa, n, m, S, copy}];
  if (!l) {
    const Planes& p = planes_for(n, m, S);
    l = cpukern::widely_linear::prepare(p.planes.data(), p.scales.data(), false, S, n,
                                        (m + 15) / 16, m, isa);
  }
  return l;
}

void bench(benchmark::State& state, std::string isa, int64_t rows, int64_t cols, int64_t S,
           int64_t B, int threads, bool fused, bool cold) {
  const int64_t n = rows / 2, m = cols / 2;
  std::vector<std::shared_ptr<const PreparedLayer>> layers = {layer_for(isa, n, m, S)};
  if (cold)
    for (int c = 1, sets = cpukern::bench::cold_sets(layers[0]->nbytes()); c < sets; ++c)
      layers.push_back(layer_for(isa, n, m, S, c));
  const auto& layer = layers[0];
  std::vector<float> x(B * 2 * m), y(B * 2 * n);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  size_t next = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    cpukern::widely_linear::run(*layers[next], x.data(), B, fused, threads, y.data());
    if (++next == layers.size()) next = 0;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["of_probe"] =
      double(layer->nbytes()) * double(state.iterations()) / seconds /
      cpukern::bench::probe_bytes_per_s(cpukern::bench::all_cores());
  state.counters["GB/s"] = benchmark::Counter(double(layer->nbytes()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["Gw/s"] = benchmark::Counter(double(S * 4 * n * m) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// Prepare (validation, scales, and the packer prepare() picks for the variant's layout).
void bench_prepare(benchmark::State& state, std::string isa, int64_t rows, int64_t cols,
                   int64_t S) {
  const int64_t n = rows / 2, m = cols / 2;
  const Planes& p = planes_for(n, m, S);
  for (auto _ : state) {
    auto l = cpukern::widely_linear::prepare(p.planes.data(), p.scales.data(), false, S, n,
                                             (m + 15) / 16, m, isa);
    benchmark::DoNotOptimize(l.get());
  }
}

// One packer of the kernel list (e.g. g3r8x4's portable and pext packers).
void bench_pack(benchmark::State& state, const cpukern::widely_linear::Packer* p, int64_t rows,
                int64_t cols, int64_t S) {
  const int64_t n = rows / 2, m = cols / 2;
  const Planes& planes = planes_for(n, m, S);
  const cpukern::widely_linear::Dims d{S, n, m, (m + 15) / 16};
  std::vector<uint8_t> out(p->layout->packed_size(d));
  for (auto _ : state) {
    p->pack(planes.planes.data(), d, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
}

void register_all() {
  for (const auto& p : cpukern::widely_linear::packers()) {
    if (!p.supported()) continue;
    benchmark::RegisterBenchmark(
        (std::string("widely_linear_pack/") + p.name + "/4096x4096/S1").c_str(), bench_pack, &p,
        4096, 4096, 1)
        ->Unit(benchmark::kMillisecond);
  }
  const int64_t shapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
  for (const auto& v : cpukern::widely_linear::list_variants()) {
    if (!v.supported) continue;
    benchmark::RegisterBenchmark(("widely_linear_prepare/" + v.name + "/4096x4096/S1").c_str(),
                                 bench_prepare, v.name, 4096, 4096, 1)
        ->Unit(benchmark::kMillisecond);
    for (const auto& sh : shapes)
      for (int64_t S : {1, 2})
        for (int64_t B : {1, 4})
          for (int threads : {1, 2})
            for (bool fused : {true, false})
              for (bool cold : {false, true}) {
                if (cold && B != 1) continue;  // cold: decode (B=1) only
                const std::string name =
                    "widely_linear/" + v.name + "/" + std::to_string(sh[0]) + "x" +
                    std::to_string(sh[1]) + "/S" + std::to_string(S) + "/B" + std::to_string(B) +
                    "/t" + std::to_string(threads) + (fused ? "/fused" : "/unfused") +
                    (cold ? "/cold" : "/hot");
                benchmark::RegisterBenchmark(name.c_str(), bench, v.name, sh[0], sh[1], S, B,
                                             threads, fused, cold)
                    ->Unit(benchmark::kMicrosecond)
                    ->UseRealTime();
              }
  }
}

}  // namespace

int main(int argc, char** argv) {
  cpukern::bench::add_machine_context();
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
