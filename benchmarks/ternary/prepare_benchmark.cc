// Ternary prepare benchmarks: the one-time conversion of the public words into a variant's
// layouts, for every row this CPU runs plus the SIMDe rows of the AVX-512 micro-kernels
// (their layouts are packed by the same packers a real AVX-512 CPU uses where no ISA-specific
// packer exists). Modes:
//   fp32  prepare(): validation of the public words + the fp32 micro-kernel's layout
//   int8  the int8 layout, packed lazily by the first int8 gemv (i8_data()), alone
// Counter GB/s = bytes of public words (m * ceil(k/16) * 4) per second.
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/aligned_buffer.h"
#include "kernels/common/thread_pool.h"
#include "kernels/ternary/ternary.h"
#include "kernels/ternary/ukernel.h"
#include "tests/cc/ternary/list_rows.h"

namespace cpukern::ternary {
namespace {

struct Shape {
  int64_t m, k;
};
const Shape kShapes[] = {{4096, 14336}, {14336, 4096}};

// Random public words of one shape (one third each of -1, 0, +1), made once.
const std::vector<uint32_t>& public_words(int64_t m, int64_t k) {
  static std::map<std::pair<int64_t, int64_t>, std::vector<uint32_t>> cache;
  auto it = cache.find({m, k});
  if (it != cache.end()) return it->second;
  std::mt19937 rng(7);
  const int64_t words = words_for(k);
  std::vector<uint32_t> p(size_t(m * words));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t w = 0; w < words; ++w) {
      uint32_t word = 0;
      for (int64_t s = 0; s < 16 && w * 16 + s < k; ++s) word |= uint32_t(rng() % 3) << (2 * s);
      p[size_t(r * words + w)] = word;
    }
  return cache.emplace(std::make_pair(m, k), std::move(p)).first->second;
}

std::shared_ptr<const PreparedWeights> prepare_row(const Variant& v, bool simde,
                                                   const std::vector<uint32_t>& p, int64_t m,
                                                   int64_t k, int threads) {
  // SIMDe rows are not in the registry: prepare_variant (packing only, no validation).
  if (simde) return prepare_variant(v, p.data(), m, k, nullptr, threads);
  return prepare(p.data(), m, words_for(k), k, nullptr, v.name, threads);
}

void run_bench(benchmark::State& state, const Variant* v, bool simde, Shape sh, bool int8,
               int threads) {
  const auto& p = public_words(sh.m, sh.k);
  for (auto _ : state) {
    if (!int8) {
      auto w = prepare_row(*v, simde, p, sh.m, sh.k, threads);
      benchmark::DoNotOptimize(w->layout());
      state.PauseTiming();  // freeing the layout is not prepare's cost
      w.reset();
      state.ResumeTiming();
    } else {
      state.PauseTiming();
      auto w = prepare_row(*v, simde, p, sh.m, sh.k, threads);
      state.ResumeTiming();
      benchmark::DoNotOptimize(w->i8_data(threads));
      state.PauseTiming();
      w.reset();
      state.ResumeTiming();
    }
  }
  state.counters["GB/s"] = benchmark::Counter(double(p.size()) * 4.0 * 1e-9 *
                                                  double(state.iterations()),
                                              benchmark::Counter::kIsRate);
}

void register_row(const Variant* v, bool simde) {
  for (const Shape& sh : kShapes)
    for (bool int8 : {false, true}) {
      const TernaryGemvUkernel& uk = v->ukernel;
      // The int8 layout is the fp32 one for some rows: nothing to pack lazily.
      if (int8 && std::strcmp(uk.f32.layout, uk.i8.layout) == 0) continue;
      for (int threads : {1, 2}) {
        const std::string name = std::string("prepare/") + v->name + "/" +
                                 (int8 ? uk.i8.layout : uk.f32.layout) + "/" +
                                 std::to_string(sh.m) + "x" + std::to_string(sh.k) + "/T" +
                                 std::to_string(threads);
        benchmark::RegisterBenchmark(name.c_str(), run_bench, v, simde, sh, int8, threads)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
}

// Stages of prepare, for profiling: each packer (and unpack, the first half of the lazy int8
// layout) alone over the whole matrix on the calling thread (no copy, no validation), and
// the allocation of a zeroed layout.
void run_packer(benchmark::State& state, const PackerRow* row, int64_t (*size)(int64_t, int64_t),
                Shape sh) {
  const auto& p = public_words(sh.m, sh.k);
  AlignedBuffer dst(static_cast<size_t>(size(sh.m, sh.k)));
  for (auto _ : state) {
    row->packer.pack(p.data(), sh.m, sh.k, dst.data());
    benchmark::DoNotOptimize(dst.data());
  }
  state.counters["GB/s"] = benchmark::Counter(double(p.size()) * 4.0 * 1e-9 *
                                                  double(state.iterations()),
                                              benchmark::Counter::kIsRate);
}

void run_unpacker(benchmark::State& state, const PackerRow* row,
                  int64_t (*size)(int64_t, int64_t), Shape sh) {
  const auto& p = public_words(sh.m, sh.k);
  AlignedBuffer layout(static_cast<size_t>(size(sh.m, sh.k)));
  std::vector<uint32_t> back(p.size());
  row->packer.pack(p.data(), sh.m, sh.k, layout.data());
  for (auto _ : state) {
    row->packer.unpack(layout.data(), sh.m, sh.k, back.data());
    benchmark::DoNotOptimize(back.data());
  }
  state.counters["GB/s"] = benchmark::Counter(double(p.size()) * 4.0 * 1e-9 *
                                                  double(state.iterations()),
                                              benchmark::Counter::kIsRate);
}

void run_alloc(benchmark::State& state, int64_t bytes) {
  for (auto _ : state) {
    AlignedBuffer b(static_cast<size_t>(bytes));
    benchmark::DoNotOptimize(b.data());
  }
}

const bool registered = [] {
  std::vector<const Variant*> rows;
  for (const Variant& row : registry().all_rows())
    if (row.supported()) {
      register_row(&row, false);
      rows.push_back(&row);
    }
  for (const Variant& row : simde_variants()) {
    register_row(&row, true);
    rows.push_back(&row);
  }
  const Shape sh = kShapes[0];
  for (const PackerRow& pr : packers()) {
    if (!pr.supported()) continue;
    int64_t (*size)(int64_t, int64_t) = nullptr;
    for (const Variant* v : rows) {
      if (std::strcmp(v->ukernel.f32.layout, pr.layout) == 0) size = v->ukernel.f32.packed_size;
      if (std::strcmp(v->ukernel.i8.layout, pr.layout) == 0) size = v->ukernel.i8.packed_size;
    }
    if (!size) continue;
    const std::string name = std::string("stage/pack/") + pr.packer.name + "/" +
                             std::to_string(sh.m) + "x" + std::to_string(sh.k);
    benchmark::RegisterBenchmark(name.c_str(), run_packer, &pr, size, sh)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    if (!pr.packer.unpack) continue;
    const std::string uname = std::string("stage/unpack/") + pr.packer.name + "/" +
                              std::to_string(sh.m) + "x" + std::to_string(sh.k);
    benchmark::RegisterBenchmark(uname.c_str(), run_unpacker, &pr, size, sh)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  const int64_t bytes = sh.m * words_for(sh.k) * 4;
  benchmark::RegisterBenchmark(("stage/alloc_zeroed/" + std::to_string(bytes)).c_str(), run_alloc,
                               bytes)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace
}  // namespace cpukern::ternary
