// A streaming-read probe: the DRAM read bandwidth that decode kernels are bound by, measured
// with the same thread pool and thread count as the kernels (a single-threaded numpy sum
// reaches only about half of what all cores stream here).
#pragma once
#include <cstdint>

namespace cpukern {

// Bytes per second of summing a `bytes` buffer (much larger than the L3 for a DRAM figure)
// split over `threads` (0 = the default), best of repetitions over at least `min_seconds`.
double measure_read_bandwidth(int64_t bytes, int threads, double min_seconds);

}  // namespace cpukern
