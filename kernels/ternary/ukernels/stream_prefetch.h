// The software prefetch of a ternary micro-kernel's weight stream, written once: the cold
// (DRAM) batch-1 GEMV overlapped decode and memory poorly with the hardware prefetcher alone
// (Zen 5, 32768x14336: fp32 lut27r16 1.15x, int8 q2b 1.2-1.4x faster with it; 1 KiB ahead
// beat 0.5-8 KiB, L2-only and non-temporal hints). __builtin_prefetch(p, 0, 3) is prefetcht0
// on x86 and compiles on any target (the SIMDe builds included).
#pragma once
#include <cstdint>

namespace cpukern::ternary {

inline constexpr int64_t kStreamPrefetchBytes = 1024;

inline void prefetch_ahead(const void* p) {
  __builtin_prefetch(static_cast<const char*>(p) + kStreamPrefetchBytes, 0, 3);
}

// The same distance for a kernel that streams NT tiles of tile_bytes side by side (tile t at
// byte pos of its tile), then the next NT tiles: where the distance runs past the end of tile
// t (bytes another stream of this group reads), it lands as far into tile t + NT instead, so
// the next group's streams start warm rather than on demand misses.
inline void prefetch_ahead_grouped(const void* p, int64_t pos, int64_t tile_bytes, int nt) {
  const int64_t skip = pos + kStreamPrefetchBytes >= tile_bytes ? (nt - 1) * tile_bytes : 0;
  __builtin_prefetch(static_cast<const char*>(p) + kStreamPrefetchBytes + skip, 0, 3);
}

}  // namespace cpukern::ternary
