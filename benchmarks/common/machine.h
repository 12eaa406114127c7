// What the benchmarks ran on, measured rather than assumed, and the hot/cold bookkeeping
// every benchmark shares: the L3 size (sysfs), the CPU (/proc/cpuinfo), a measured clock,
// and the all-core streaming-read probe (kernels/common/bandwidth.cc, the same probe as
// cpukern's _ext.read_bandwidth) that cold rows are reported against.
#pragma once
#include <cstdint>
#include <string>

namespace cpukern::bench {

// Bytes of the largest last-level (L3) cache of cpu0 from sysfs; 32 MiB when unreadable.
int64_t l3_bytes();

// "AuthenticAMD family 25 model 1 stepping 1: AMD EPYC ..." from /proc/cpuinfo.
std::string cpu_description();

// GHz of a dependent chain of integer adds (one cycle each): the clock the core ran at
// while measured, turbo included. 0 where no chain is written for the architecture.
double measured_clock_ghz();

// Streaming-read bytes/s with `threads` threads over a buffer of 16x the L3 (at least
// 512 MiB); measured once per thread count and cached.
double probe_bytes_per_s(int threads);

// The number of cores (the probe's "all cores").
int all_cores();

// Distinct weight sets a cold row rotates over: the sets together span at least 3x the
// L3, so no set is still cached when its turn comes again (at least 2 sets).
int cold_sets(int64_t bytes_per_set);

// Adds cpu, measured clock, L3 and cores to google benchmark's context (printed at the
// top of every run and in --benchmark_format=json).
void add_machine_context();

}  // namespace cpukern::bench
