// Fused MoE layers of real models, every registry row (kernel list line) this CPU runs, every
// weight format (bf16, mxfp4, int8, mxfp4_a8 = W4A8), T in {1, 16, 64, 256} (and 2, 4, 8
// for gpt-oss-20b's MXFP4 decode),
// threads 1 and all. Counters: ms per call, TFLOP/s, GB/s of expert weights touched (each
// distinct routed expert's w13 + w2 read once), of_probe = that GB/s over the all-core
// streaming-read probe (benchmarks/bandwidth). The reference variant (scalar) runs T=1 only.
// Every layer row ends in /hot or /cold:
//   hot:  the same routing every call (the same experts' weights; fits_l3 says whether they
//         fit in the L3 at all: for these layers they never do, so hot streams them too);
//   cold: calls rotate over 8 routings drawn independently, whose experts together span
//         >= 3x the L3, so a call's experts were not read by the call before.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmarks/common/machine.h"
#include "kernels/common/bf16.h"
#include "kernels/common/cpu_features.h"
#include "kernels/moe/int8.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {
namespace {

struct Layer {
  const char* name;
  int64_t e, topk, h, i;
  Activation act;
  bool bias;
};

const Layer kLayers[] = {
    {"gpt-oss-20b", 32, 4, 2880, 2880, Activation::kSwigluOai, true},
    {"gemma-4-26B-A4B", 128, 8, 2816, 704, Activation::kGeluTanh, false},
    {"Qwen3-30B-A3B", 128, 8, 2048, 768, Activation::kSilu, false},
};

void fill_random(std::vector<bf16_t>& v, float scale, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x = f32_to_bf16((float(int32_t(s >> 40) - (1 << 23)) / float(1 << 23)) * scale);
  }
}

// One (layer, variant) packed at a time: the big layers take gigabytes.
struct Packed {
  const Layer* layer = nullptr;
  std::string isa, format;
  std::shared_ptr<const PackedExperts> w13, w2;
  std::vector<bf16_t> b13, b2;
};

// bf16 weights (e, o, i) packed for isa in `format` (MXFP4, int8: quantized first; MXFP4 needs
// i % 32 == 0).
std::shared_ptr<const PackedExperts> pack_format(const std::vector<bf16_t>& raw, int64_t e,
                                                 int64_t o, int64_t i, const std::string& isa,
                                                 const std::string& format) {
  if (format == "bf16") return prepare(raw.data(), e, o, i, isa);
  if (format == "int8") {
    std::vector<int8_t> q(raw.size());
    std::vector<float> s(size_t(e * o));
    int8::quantize_weights(raw.data(), e * o, i, q.data(), s.data());
    return prepare_int8(q.data(), s.data(), e, o, i, isa);
  }
  std::vector<uint8_t> blocks(size_t(e * o * i / 2)), scales(size_t(e * o * i / 32));
  mxfp4::quantize(raw.data(), e * o, i, blocks.data(), scales.data());
  return prepare_mxfp4(blocks.data(), scales.data(), e, o, i, isa, parse_format(format));
}

Packed& packed(const Layer& l, const std::string& isa, const std::string& format) {
  static Packed p;
  if (p.layer == &l && p.isa == isa && p.format == format) return p;
  p.w13.reset();
  p.w2.reset();
  {
    std::vector<bf16_t> raw(size_t(l.e * 2 * l.i * l.h));
    fill_random(raw, 1.7f / std::sqrt(float(l.h)), 1);
    p.w13 = pack_format(raw, l.e, 2 * l.i, l.h, isa, format);
  }
  {
    std::vector<bf16_t> raw(size_t(l.e * l.h * l.i));
    fill_random(raw, 1.7f / std::sqrt(float(l.i)), 2);
    p.w2 = pack_format(raw, l.e, l.h, l.i, isa, format);
  }
  p.format = format;
  p.b13.assign(size_t(l.e * 2 * l.i), 0);
  p.b2.assign(size_t(l.e * l.h), 0);
  fill_random(p.b13, 0.5f, 3);
  fill_random(p.b2, 0.5f, 4);
  p.layer = &l;
  p.isa = isa;
  return p;
}

// One routing of t tokens: topk distinct experts per token, weights 1/topk.
struct Routing {
  std::vector<float> wts;
  std::vector<int32_t> ids;
  int64_t experts = 0;  // distinct experts touched
};

Routing make_routing(const Layer& l, int64_t t, uint32_t seed) {
  Routing r;
  r.wts.assign(size_t(t * l.topk), 1.0f / float(l.topk));
  r.ids.resize(size_t(t * l.topk));
  std::mt19937 rng(seed);
  std::vector<int32_t> perm(size_t(l.e));
  std::vector<char> touched(size_t(l.e), 0);
  for (int64_t tok = 0; tok < t; ++tok) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t j = 0; j < l.topk; ++j) {
      r.ids[size_t(tok * l.topk + j)] = perm[size_t(j)];
      touched[size_t(perm[size_t(j)])] = 1;
    }
  }
  r.experts = std::count(touched.begin(), touched.end(), 1);
  return r;
}

constexpr int kColdRoutings = 8;

// Bytes of one expert (w13 + w2): bf16 2 per weight, MXFP4 17/32 (4.25 bits), int8 1 (plus
// one fp32 scale per output channel).
double expert_bytes(const Layer& l, const std::string& format) {
  if (format == "int8") return 3.0 * l.i * l.h + 4.0 * (2 * l.i + l.h);
  return (3.0 * l.i * l.h) * (format == "bf16" ? 2 : 17.0 / 32);
}

// A cold row is registered only where the layer's weights span >= 3x the L3 (all of these do).
bool cold_possible(const Layer& l, const std::string& format) {
  return double(l.e) * expert_bytes(l, format) >= 3.0 * double(bench::l3_bytes());
}

void run(benchmark::State& state, const Layer* l, std::string isa, std::string format,
         int64_t t, int threads, bool cold) {
  Packed& p = packed(*l, isa, format);
  std::vector<bf16_t> x(size_t(t * l->h)), out(size_t(t * l->h));
  fill_random(x, 1.0f, 5);
  std::vector<Routing> routes;
  for (int r = 0; r < (cold ? kColdRoutings : 1); ++r) routes.push_back(make_routing(*l, t, 11 + r));
  double experts = 0;
  for (const Routing& r : routes) experts += double(r.experts) / double(routes.size());
  size_t next = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const Routing& r = routes[next];
    if (++next == routes.size()) next = 0;
    fused_moe(x.data(), t, l->h, *p.w13, *p.w2, r.wts.data(), r.ids.data(), l->topk, l->act,
              l->bias ? p.b13.data() : nullptr, l->bias ? p.b2.data() : nullptr, false, threads,
              out.data());
    benchmark::DoNotOptimize(out.data());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flop = double(t) * l->topk * (2.0 * 2 * l->i * l->h + 2.0 * l->h * l->i);
  const double bytes = experts * expert_bytes(*l, format);  // weights read per call (mean)
  const double n = double(state.iterations());
  state.counters["ms"] = benchmark::Counter(1e-3 * n, benchmark::Counter::kIsRate |
                                                          benchmark::Counter::kInvert);
  state.counters["TFLOP/s"] = benchmark::Counter(flop * n * 1e-12, benchmark::Counter::kIsRate);
  state.counters["GB/s"] = benchmark::Counter(bytes * n * 1e-9, benchmark::Counter::kIsRate);
  state.counters["of_probe"] = bytes * n / seconds / bench::probe_bytes_per_s(bench::all_cores());
  state.counters["experts"] = experts;
  state.counters["fits_l3"] = bytes <= double(bench::l3_bytes()) ? 1 : 0;
}

int register_all() {
  bench::add_machine_context();
  const int all = std::max(1, cpu_info().num_cores);
  for (const Layer& l : kLayers)
    for (const Variant& v : registry().all_rows()) {
      if (!v.supported()) continue;
      for (std::string format : {"bf16", "mxfp4", "int8", "mxfp4_a8"})
      for (int64_t t : {1, 2, 4, 8, 16, 64, 256}) {
        if (v.name == std::string("reference") && t > 1) continue;
        // T = 2..8: the exact MXFP4 decode of gpt-oss-20b (1-2 token rows per expert).
        if (t > 1 && t < 16 && (format != "mxfp4" || l.name != std::string("gpt-oss-20b")))
          continue;
        if (format.rfind("mxfp4", 0) == 0 && (l.h % 32 || l.i % 32)) continue;
        for (int th : all == 1 ? std::vector<int>{1} : std::vector<int>{1, all})
          for (bool cold : {false, true}) {
            if (cold && !cold_possible(l, format)) continue;
            const std::string name = std::string("moe/") + l.name + "/" + v.name + "/" +
                                     format + "/T:" + std::to_string(t) + "/threads:" +
                                     std::to_string(th) + (cold ? "/cold" : "/hot");
            benchmark::RegisterBenchmark(name.c_str(), run, &l, v.name, format, t, th, cold)
                ->Unit(benchmark::kMillisecond)
                ->UseRealTime()
                ->MinTime(0.2);
          }
      }
    }
  return 0;
}
const int registered = register_all();

}  // namespace
}  // namespace cpukern::moe

// ---- micro-kernel alone: m packed rows x `cols` columns x K, weights L2-resident ----
namespace cpukern::moe {
namespace {

void run_ukernel(benchmark::State& state, std::string isa, std::string format, int64_t m,
                 int64_t k, int64_t cols) {
  const Variant& v = registry().select(isa);
  const bool mx = format.rfind("mxfp4", 0) == 0, i8 = format == "int8";
  const Ukernel& uk = ukernel_for(v, parse_format(format));
  const int64_t panels = (cols + uk.nr - 1) / uk.nr;
  std::vector<bf16_t> w(size_t(panels * uk.nr * k)), a(size_t(m * k));
  fill_random(w, 0.05f, 7);
  fill_random(a, 1.0f, 8);
  AlignedBuffer wp(size_t(uk.packed_size(panels * uk.nr, k)));
  if (i8) {
    std::vector<int8_t> q(w.size());
    std::vector<float> s(size_t(panels * uk.nr));
    int8::quantize_weights(w.data(), panels * uk.nr, k, q.data(), s.data());
    uk.pack({q.data(), s.data()}, panels * uk.nr, k, wp.data());
  } else if (mx) {
    std::vector<uint8_t> blocks(size_t(panels * uk.nr * k / 2)), scales(size_t(panels * uk.nr * k / 32));
    mxfp4::quantize(w.data(), panels * uk.nr, k, blocks.data(), scales.data());
    uk.pack({blocks.data(), scales.data()}, panels * uk.nr, k, wp.data());
  } else {
    uk.pack({w.data()}, panels * uk.nr, k, wp.data());
  }
  AlignedBuffer ap(size_t(uk.packed_a_size(m, k)));
  uk.pack_a(a.data(), k, nullptr, m, k, ap.data());
  const int64_t ldc = panels * uk.nr;
  std::vector<float> c(size_t(m * ldc));
  for (auto _ : state) {
    uk.gemm(ap.data(), m, k, wp.data(), 0, panels, c.data(), ldc, false);
    benchmark::DoNotOptimize(c.data());
  }
  // Weight bytes read (bf16: 2 per weight; MXFP4: 4.25 bits; int8: 1 byte + a scale per column).
  state.counters["GB/s"] = benchmark::Counter(double(uk.packed_size(panels * uk.nr, k)) * 1e-9 *
                                                  double(state.iterations()),
                                              benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * k * panels * uk.nr * 1e-9 *
                                                     double(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}

int register_ukernels() {
  for (const Variant& v : registry().all_rows()) {
    if (!v.supported() || v.name == std::string("reference")) continue;
    for (const char* f : {"bf16", "mxfp4", "int8", "mxfp4_a8"}) {
      const std::string pre = "ukernel/" + std::string(v.name) + "/" + f;
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16})
        benchmark::RegisterBenchmark(
            (pre + "/m:" + std::to_string(m) + "/k:2880/cols:128").c_str(), run_ukernel,
            v.name, f, m, 2880, 128)
            ->UseRealTime()
            ->MinTime(0.1);
      // Weights streamed from memory (bf16: 94 MB, past the caches): decode and a T=64 expert.
      for (int64_t m : {1, 8})
        benchmark::RegisterBenchmark(
            (pre + "/m:" + std::to_string(m) + "/k:2880/cols:16384").c_str(), run_ukernel,
            v.name, f, m, 2880, 16384)
            ->UseRealTime()
            ->MinTime(0.3);
    }
  }
  return 0;
}
const int registered_ukernels = register_ukernels();

}  // namespace
}  // namespace cpukern::moe

// ---- the dense layer (op "linear") at decode and small batches, weights cold ----
// gpt-oss-20b's q_proj shape (4096 x 2880), T = 1, 2, 4, 8 (speculative decoding, batched
// serving): calls rotate over copies of the packed weights spanning >= 3x the L3, so every
// call reads its weights from memory. Whether T = 2..8 share the weight pass shows as ms
// against T = 1 (docs/performance/moe.md, "Small batches").
namespace cpukern::moe {
namespace {

struct DenseCopies {
  std::string isa, format;
  std::vector<std::shared_ptr<const PackedExperts>> copies;
};

DenseCopies& dense_copies(const std::string& isa, const std::string& format, int64_t o,
                          int64_t i) {
  static DenseCopies d;
  if (d.isa == isa && d.format == format && !d.copies.empty()) return d;
  d.copies.clear();
  std::vector<bf16_t> raw(size_t(o * i));
  fill_random(raw, 1.7f / std::sqrt(float(i)), 21);
  const auto first = pack_format(raw, 1, o, i, isa, format);
  const int64_t bytes = first->nbytes();
  const int64_t n = std::max<int64_t>(2, (3 * bench::l3_bytes() + bytes - 1) / bytes);
  d.copies.push_back(first);
  for (int64_t c = 1; c < n; ++c) d.copies.push_back(pack_format(raw, 1, o, i, isa, format));
  d.isa = isa;
  d.format = format;
  return d;
}

void run_dense(benchmark::State& state, std::string isa, std::string format, int64_t o,
               int64_t i, int64_t t, int threads) {
  DenseCopies& d = dense_copies(isa, format, o, i);
  std::vector<bf16_t> x(size_t(t * i)), out(size_t(t * o));
  fill_random(x, 1.0f, 22);
  size_t next = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    linear(x.data(), t, i, *d.copies[next], nullptr, threads, out.data());
    if (++next == d.copies.size()) next = 0;
    benchmark::DoNotOptimize(out.data());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double n = double(state.iterations()), bytes = double(d.copies[0]->nbytes());
  state.counters["ms"] = benchmark::Counter(1e-3 * n, benchmark::Counter::kIsRate |
                                                          benchmark::Counter::kInvert);
  state.counters["GB/s"] = benchmark::Counter(bytes * n * 1e-9, benchmark::Counter::kIsRate);
  state.counters["of_probe"] = bytes * n / seconds / bench::probe_bytes_per_s(threads);
  state.counters["copies"] = double(d.copies.size());
}

const int registered_dense = [] {
  const int all = std::max(1, cpu_info().num_cores);
  const int64_t o = 4096, i = 2880;
  for (const Variant& v : linear_registry().variants()) {
    if (!v.supported() || v.name == std::string("reference")) continue;
    for (const char* f : {"bf16", "mxfp4", "int8", "mxfp4_a8"})
      for (int64_t t : {1, 2, 4, 8})
        for (int th : all == 1 ? std::vector<int>{1} : std::vector<int>{1, all})
          benchmark::RegisterBenchmark(("linear/gpt-oss-20b.q_proj/" + std::string(v.name) + "/" +
                                        f + "/T:" + std::to_string(t) + "/threads:" +
                                        std::to_string(th) + "/cold")
                                           .c_str(),
                                       run_dense, v.name, f, o, i, t, th)
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime()
              ->MinTime(0.2);
  }
  return 0;
}();

}  // namespace
}  // namespace cpukern::moe

// ---- the DRAM read-bandwidth floor: the shared all-core probe (kernels/common/bandwidth.cc,
// also `//benchmarks/bandwidth`), as rows, so a filtered run prints it next to the layers ----
namespace cpukern::moe {
namespace {

void read_bandwidth(benchmark::State& state, int threads) {
  for (auto _ : state) benchmark::DoNotOptimize(threads);
  state.counters["GB/s"] = bench::probe_bytes_per_s(threads) * 1e-9;
}

const int registered_bw = [] {
  const int all = std::max(1, cpu_info().num_cores);
  for (int th = 1; th <= all; ++th)
    benchmark::RegisterBenchmark(("bandwidth/read/threads:" + std::to_string(th)).c_str(),
                                 read_bandwidth, th)
        ->Iterations(1);
  return 0;
}();

}  // namespace
}  // namespace cpukern::moe
