// The all-core streaming-read probe, on its own: the machine as measured (CPU, clock, L3)
// and GB/s of reading a buffer far larger than the L3 with 1..all threads. The same probe
// (kernels/common/bandwidth.cc) backs the google benchmarks' 'of_probe' counters and the
// demo's read bandwidth.
//   ./bazelw run //benchmarks/bandwidth            # a table
//   ./bazelw run //benchmarks/bandwidth -- --json  # one JSON object (benchmarks/peer reads it)
#include <cstdio>
#include <cstring>
#include <string>

#include "benchmarks/common/machine.h"

int main(int argc, char** argv) {
  namespace b = cpukern::bench;
  const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  if (argc > 1 && !json) {
    std::fprintf(stderr, "usage: %s [--json]\n", argv[0]);
    return 2;
  }
  const int cores = b::all_cores();
  const double ghz = b::measured_clock_ghz();
  std::string per_threads;
  for (int t = 1; t <= cores; ++t) {
    const double gbs = b::probe_bytes_per_s(t) * 1e-9;
    char cell[64];
    std::snprintf(cell, sizeof cell, json ? "%s\"%d\": %.2f" : "%s%d: %.1f GB/s",
                  t == 1 ? "" : ", ", t, gbs);
    per_threads += cell;
  }
  std::string cpu = b::cpu_description();
  if (json) {
    for (char& c : cpu)
      if (c == '"' || c == '\\') c = '\'';
    std::printf("{\"cpu\": \"%s\", \"clock_GHz_measured\": %.3f, \"l3_bytes\": %lld, "
                "\"cores\": %d, \"read_GB_s\": {%s}}\n",
                cpu.c_str(), ghz, (long long)b::l3_bytes(), cores, per_threads.c_str());
  } else {
    std::printf("cpu: %s\nclock (measured, dependent adds): %.2f GHz\nL3: %lld MiB, %d cores\n"
                "streaming read, buffer max(512 MiB, 16x L3): %s\n",
                cpu.c_str(), ghz, (long long)(b::l3_bytes() >> 20), cores, per_threads.c_str());
  }
  return 0;
}
