// CPU feature detection, done once per process.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cpukern {

enum class Arch { kX86_64, kAArch64, kOther };

// One bit per feature a variant may require.
enum Feature : uint64_t {
  // x86-64
  kSSE42 = 1ull << 0,
  kAVX2 = 1ull << 1,
  kFMA = 1ull << 2,
  kBMI2 = 1ull << 3,
  kFastPext = 1ull << 4,  // BMI2 pext is not microcoded (everything except AMD Zen 1/2)
  kAVX512F = 1ull << 5,   // includes OS support for the zmm/opmask state (XCR0)
  kAVX512BW = 1ull << 6,
  kAVX512VL = 1ull << 7,
  kAVX512VNNI = 1ull << 8,
  kAVX512BF16 = 1ull << 9,
  kAVXVNNI = 1ull << 10,
  // AMX: CPUID, the tile state enabled in XCR0, and (Linux) this process's permission to use
  // tile data (arch_prctl ARCH_REQ_XCOMP_PERM, requested once at detection).
  kAMXTile = 1ull << 11,
  kAMXBF16 = 1ull << 12,
  kAMXINT8 = 1ull << 13,
  // AArch64
  kNEON = 1ull << 32,
  kDotProd = 1ull << 33,
  kBF16 = 1ull << 34,  // FEAT_BF16 (BFMMLA, BFDOT)
  kI8MM = 1ull << 35,
  kSVE = 1ull << 36,
};

// "amx" in CPUKERN_DISABLE_FEATURES hides all three.
inline constexpr uint64_t kAMX = kAMXTile | kAMXBF16 | kAMXINT8;

struct CpuInfo {
  Arch arch = Arch::kOther;
  uint64_t features = 0;
  std::string vendor;          // "GenuineIntel", "AuthenticAMD", "arm", ...
  int num_cores = 1;           // usable CPUs: affinity mask and cgroup CPU quota (at detection)
  int64_t l2_bytes = 1 << 20;  // per-core L2, best effort
  int64_t l3_bytes = 32 << 20;  // cpu0's L3 (sysfs, else sysconf), best effort
  // Why features the CPU reports are unusable here (e.g. the OS refused AMX tile data).
  std::vector<std::pair<uint64_t, std::string>> unusable;
  uint64_t hidden = 0;  // features the CPU reports that CPUKERN_DISABLE_FEATURES hid
};

// Detected once, thread-safe. Setting CPUKERN_DISABLE_FEATURES="avx512f,bf16"
// masks features out (to exercise fallbacks on a capable machine).
const CpuInfo& cpu_info();

inline bool cpu_has(uint64_t required) { return (cpu_info().features & required) == required; }

// CPUs this process may use now: online CPUs, capped by its affinity mask
// (sched_getaffinity) and its cgroup's CPU quota (containers), at least 1.
int usable_cores();
// Cores a CFS quota text allows ("quota period": cgroup v2 cpu.max; rounded up); 0 = no limit.
int cores_from_cpu_quota(const std::string& text);

const char* arch_name(Arch a);
// Names of the bits set in `features`, lower-case ("avx2", "bmi2", "bf16", ...).
std::vector<std::string> feature_names(uint64_t features);
// Parses one feature name ("amx": the three AMX bits); returns 0 for an unknown name.
uint64_t feature_from_name(const std::string& name);
// AMX, step by step: the AMX bits CPUID leaf 7 EDX reports (bits 24 TILE, 22 BF16, 25 INT8;
// none without TILE), all usable, or none when XCR0 lacks the tile state (bits 17-18) or
// request_tile_data() returns why it was refused (`why` says which; "" when usable).
// request_tile_data == nullptr: only what CPUID reports. detect() runs it once with
// Linux's arch_prctl(ARCH_REQ_XCOMP_PERM) request.
uint64_t usable_amx(uint32_t leaf7_edx, uint64_t xcr0, std::string (*request_tile_data)(),
                    std::string* why);
// Why this process lacks the features in `missing`, one clause per reason, e.g.
// "amx_tile, amx_bf16, amx_int8: not reported by this CPU" (empty when none is missing).
std::string why_missing(uint64_t missing);

}  // namespace cpukern
