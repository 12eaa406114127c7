#include "benchmarks/common/machine.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "kernels/common/bandwidth.h"
#include "kernels/common/cpu_features.h"

namespace cpukern::bench {
int64_t l3_bytes() { return cpu_info().l3_bytes; }

std::string cpu_description() {
  std::ifstream f("/proc/cpuinfo");
  std::map<std::string, std::string> kv;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) break;  // the first processor is enough
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon), val = line.substr(colon + 1);
    key.erase(key.find_last_not_of(" \t") + 1);
    val.erase(0, val.find_first_not_of(" \t"));
    kv[key] = val;
  }
  std::ostringstream o;
  if (kv.count("vendor_id"))  // x86
    o << kv["vendor_id"] << " family " << kv["cpu family"] << " model " << kv["model"]
      << " stepping " << kv["stepping"] << ": " << kv["model name"];
  else if (kv.count("CPU implementer"))  // AArch64: MIDR fields
    o << "implementer " << kv["CPU implementer"] << " part " << kv["CPU part"] << " variant "
      << kv["CPU variant"] << " revision " << kv["CPU revision"];
  else
    o << "unknown";
  return o.str();
}

double measured_clock_ghz() {
#if defined(__x86_64__) || defined(__aarch64__)
  auto chain = [](int64_t iters) {
    uint64_t v = 1;
    for (int64_t i = 0; i < iters; ++i) {
      // 16 dependent register-register adds: 16 cycles per iteration; the loop counter runs
      // alongside. Not add-immediate: Intel cores from Golden Cove fold chains of those at
      // rename (a Xeon of that kind measured "20 GHz").
#if defined(__x86_64__)
#define CPUKERN_ADD4 "add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\t"
#else
#define CPUKERN_ADD4 "add %0, %0, %0\n\tadd %0, %0, %0\n\tadd %0, %0, %0\n\tadd %0, %0, %0\n\t"
#endif
      asm volatile(CPUKERN_ADD4 CPUKERN_ADD4 CPUKERN_ADD4 CPUKERN_ADD4 : "+r"(v));
#undef CPUKERN_ADD4
    }
    return v;
  };
  static const double ghz = [&] {
    chain(20'000'000);  // wake the core up to its running clock
    double best = 0;
    // Short repetitions, best one: on a shared core most of them run unpreempted.
    for (int rep = 0; rep < 30; ++rep) {
      const int64_t iters = 500'000;
      const auto t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(chain(iters));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, 16.0 * double(iters) / s * 1e-9);
    }
    return best;
  }();
  return ghz;
#else
  return 0;
#endif
}

int all_cores() { return std::max(1, cpu_info().num_cores); }

double probe_bytes_per_s(int threads) {
  static std::mutex mu;
  static std::map<int, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(threads);
  if (it != cache.end()) return it->second;
  const int64_t bytes = std::max<int64_t>(int64_t(512) << 20, 16 * l3_bytes());
  return cache[threads] = measure_read_bandwidth(bytes, threads, 0.5);
}

int cold_sets(int64_t bytes_per_set) {
  const int64_t need = 3 * l3_bytes();
  return int(std::max<int64_t>(2, (need + bytes_per_set - 1) / std::max<int64_t>(1, bytes_per_set)));
}

void add_machine_context() {
  benchmark::AddCustomContext("cpu", cpu_description());
  std::ostringstream clock;
  clock.precision(3);
  clock << measured_clock_ghz();
  benchmark::AddCustomContext("clock_GHz_measured", clock.str());
  benchmark::AddCustomContext("l3_bytes", std::to_string(l3_bytes()));
  benchmark::AddCustomContext("cores", std::to_string(all_cores()));
  benchmark::AddCustomContext(
      "cold_rows", "rotate over distinct weight sets spanning >= 3x the L3 ('of_probe' = bytes/s "
                   "/ all-core read probe)");
}

}  // namespace cpukern::bench
