// Calibration for the llvm-mca model (benchmarks/model/model.py --calibrate): on this machine,
// measures the core clock (a dependent chain of integer adds: 1 cycle each on every x86 core
// of the last decade, timed) and the cycles per weight of every supported x86 ternary variant
// at a shape whose prepared weights fit the L2 (hot, B = 1, 1 thread: the loop the model
// sees, plus the driver's activation preparation).
// Output lines: "clock_ghz G", "kernel <micro-kernel> <ns per weight> <variant> <mode>".
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/ternary/ternary.h"
#include "kernels/ternary/ukernel.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// 16 dependent adds per iteration; the loop counter runs in parallel.
double measure_ghz() {
  double best = 0;
  for (int rep = 0; rep < 300; ++rep) {  // short reps: the best one ran uncontended
    const int64_t iters = 400000;
    uint64_t a = 1;
    const auto t0 = Clock::now();
#if defined(__x86_64__)
    for (int64_t i = iters; i > 0; --i) {
      asm volatile(
          "add %0, %0\n add %0, %0\n add %0, %0\n add %0, %0\n"
          "add %0, %0\n add %0, %0\n add %0, %0\n add %0, %0\n"
          "add %0, %0\n add %0, %0\n add %0, %0\n add %0, %0\n"
          "add %0, %0\n add %0, %0\n add %0, %0\n add %0, %0\n"
          : "+r"(a));
    }
#elif defined(__aarch64__)
    for (int64_t i = iters; i > 0; --i) {
      asm volatile(
          "add %0, %0, %0\n add %0, %0, %0\n add %0, %0, %0\n add %0, %0, %0\n"
          "add %0, %0, %0\n add %0, %0, %0\n add %0, %0, %0\n add %0, %0, %0\n"
          "add %0, %0, %0\n add %0, %0, %0\n add %0, %0, %0\n add %0, %0, %0\n"
          "add %0, %0, %0\n add %0, %0, %0\n add %0, %0, %0\n add %0, %0, %0\n"
          : "+r"(a));
    }
#endif
    best = std::max(best, 16.0 * double(iters) / seconds_since(t0) * 1e-9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cpukern::ternary;
  const int64_t m = argc > 1 ? std::stoll(argv[1]) : 1024;
  const int64_t k = argc > 2 ? std::stoll(argv[2]) : 1536;
  const double ghz = measure_ghz();
  std::printf("clock_ghz %.3f\n", ghz);
  std::printf("shape %lldx%lld B=1 T=1\n", (long long)m, (long long)k);
  std::mt19937 rng(7);
  std::vector<uint32_t> packed(size_t(m * words_for(k)));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t w = 0; w < words_for(k); ++w) {
      uint32_t word = 0;
      for (int64_t s = 0; s < 16 && w * 16 + s < k; ++s) word |= (rng() % 3) << (2 * s);
      packed[size_t(r * words_for(k) + w)] = word;
    }
  std::vector<float> x(static_cast<size_t>(k)), y(static_cast<size_t>(m));
  std::vector<float> scale(static_cast<size_t>(m), 0.5f);
  for (auto& e : x) e = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  for (const Variant& v : registry().all_rows()) {
    if (!v.supported() || std::string(v.name) == "reference") continue;
    const auto w = prepare(packed.data(), m, words_for(k), k, scale.data(), v.name);
    w->i8_data();
    for (Act act : {Act::kF32, Act::kInt8}) {
      const char* uk = act == Act::kF32 ? v.ukernel.f32.name : v.ukernel.i8.name;
      double best = 1e30;
      for (int rep = 0; rep < 40; ++rep) {
        const int n = 100;
        const auto t0 = Clock::now();
        for (int i = 0; i < n; ++i) gemv(*w, x.data(), 1, nullptr, 0, act, 1, y.data());
        best = std::min(best, seconds_since(t0) / n);
      }
      const double ns_per_w = best * 1e9 / double(m * k);
      std::printf("kernel %s %.5f %s %s (%.1f us/call, %.3f cycles/weight)\n", uk, ns_per_w, v.name,
                  act == Act::kF32 ? "fp32" : "int8", best * 1e6, ns_per_w * ghz);
    }
  }
  return 0;
}
