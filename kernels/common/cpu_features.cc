#include "kernels/common/cpu_features.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <sstream>

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif
#elif defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace cpukern {
namespace {

struct NamedFeature {
  uint64_t bit;
  const char* name;
};

constexpr NamedFeature kFeatureNames[] = {
    {kSSE42, "sse4.2"},         {kAVX2, "avx2"},           {kFMA, "fma"},
    {kBMI2, "bmi2"},            {kFastPext, "fast_pext"},  {kAVX512F, "avx512f"},
    {kAVX512BW, "avx512bw"},    {kAVX512VL, "avx512vl"},   {kAVX512VNNI, "avx512vnni"},
    {kAVX512BF16, "avx512bf16"}, {kAVXVNNI, "avxvnni"},    {kNEON, "neon"},
    {kDotProd, "dotprod"},      {kBF16, "bf16"},           {kI8MM, "i8mm"},
    {kSVE, "sve"},              {kAMXTile, "amx_tile"},    {kAMXBF16, "amx_bf16"},
    {kAMXINT8, "amx_int8"},
};

#if defined(__x86_64__)
uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

// Linux's permission for this process to use AMX tile data; "" or why it was refused.
std::string request_linux_tile_data() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return std::string("Linux refused tile data (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
           std::strerror(errno) + ")";
  return "";
#else
  return "tile data permission is requested on Linux only";
#endif
}

void detect_amx(CpuInfo& info, unsigned leaf7_edx, uint64_t xcr0, uint64_t hidden) {
  const uint64_t amx = usable_amx(leaf7_edx, ~0ull, nullptr, nullptr);  // what CPUID reports
  if (!amx) return;
  if (!(amx & ~hidden)) {  // all hidden (masked out by detect()): ask the OS for nothing
    info.features |= amx;
    return;
  }
  std::string why;
  info.features |= usable_amx(leaf7_edx, xcr0, request_linux_tile_data, &why);
  if (!why.empty()) info.unusable.emplace_back(amx, why);
}

void detect_x86(CpuInfo& info, uint64_t hidden) {
  info.arch = Arch::kX86_64;
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  info.vendor = vendor;

  __get_cpuid(1, &a, &b, &c, &d);
  const unsigned family_base = (a >> 8) & 0xf;
  const unsigned family = family_base == 0xf ? family_base + ((a >> 20) & 0xff) : family_base;
  const bool has_osxsave = c & (1u << 27);
  const bool has_avx = c & (1u << 28);
  const bool has_fma = c & (1u << 12);
  if (c & (1u << 20)) info.features |= kSSE42;

  // The OS must save ymm (bits 1,2) and, for AVX-512, opmask/zmm state (bits 5,6,7).
  const uint64_t xcr0 = has_osxsave ? xgetbv0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;

  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned leaf7_ebx = b, leaf7_ecx = c;
    detect_amx(info, d, xcr0, hidden);
    if (os_ymm && has_avx && (leaf7_ebx & (1u << 5))) info.features |= kAVX2;
    if (os_ymm && has_fma) info.features |= kFMA;
    if (leaf7_ebx & (1u << 8)) info.features |= kBMI2;
    if (os_zmm && (leaf7_ebx & (1u << 16))) {
      info.features |= kAVX512F;
      if (leaf7_ebx & (1u << 30)) info.features |= kAVX512BW;
      if (leaf7_ebx & (1u << 31)) info.features |= kAVX512VL;
      if (leaf7_ecx & (1u << 11)) info.features |= kAVX512VNNI;
      __cpuid_count(7, 1, a, b, c, d);
      if (a & (1u << 5)) info.features |= kAVX512BF16;
    }
    __cpuid_count(7, 1, a, b, c, d);
    if (os_ymm && (a & (1u << 4))) info.features |= kAVXVNNI;
  }
  // pext/pdep are microcoded (~250 cycles) on AMD families 0x17 (Zen 1/2) and older.
  const bool slow_pext = info.vendor == "AuthenticAMD" && family < 0x19;
  if ((info.features & kBMI2) && !slow_pext) info.features |= kFastPext;
}
#elif defined(__aarch64__)
void detect_aarch64(CpuInfo& info) {
  info.arch = Arch::kAArch64;
  info.vendor = "arm";
  info.features |= kNEON;  // Advanced SIMD is mandatory on AArch64
#if defined(__linux__)
  const unsigned long hwcap = getauxval(AT_HWCAP);
  const unsigned long hwcap2 = getauxval(AT_HWCAP2);
  if (hwcap & HWCAP_ASIMDDP) info.features |= kDotProd;
  if (hwcap & HWCAP_SVE) info.features |= kSVE;
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1ul << 14)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1ul << 13)
#endif
  if (hwcap2 & HWCAP2_BF16) info.features |= kBF16;
  if (hwcap2 & HWCAP2_I8MM) info.features |= kI8MM;
#endif
}
#endif

int64_t detect_l2_bytes() {
#if defined(_SC_LEVEL2_CACHE_SIZE)
  long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (v > 0) return v;
#endif
  return 1 << 20;
}

// sysfs first (sysconf reports 0 for the L3 on many VMs and on AArch64), e.g. "32768K".
int64_t detect_l3_bytes() {
  int64_t best = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    std::ifstream level(dir + "/level"), size(dir + "/size");
    std::string lv, sz;
    if (!std::getline(level, lv) || lv != "3" || !std::getline(size, sz) || sz.empty()) continue;
    int64_t v = std::atoll(sz.c_str());
    if (sz.back() == 'K') v <<= 10;
    if (sz.back() == 'M') v <<= 20;
    if (sz.back() == 'G') v <<= 30;
    best = std::max(best, v);
  }
#if defined(_SC_LEVEL3_CACHE_SIZE)
  if (best == 0) best = std::max<long>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
  return best > 0 ? best : int64_t(32) << 20;
}

}  // namespace

uint64_t usable_amx(uint32_t leaf7_edx, uint64_t xcr0, std::string (*request_tile_data)(),
                    std::string* why) {
  uint64_t amx = 0;
  if (leaf7_edx & (1u << 24)) amx |= kAMXTile;
  if ((amx & kAMXTile) && (leaf7_edx & (1u << 22))) amx |= kAMXBF16;
  if ((amx & kAMXTile) && (leaf7_edx & (1u << 25))) amx |= kAMXINT8;
  if (!amx || !request_tile_data) return amx;
  std::string refused;
  if ((xcr0 & (3ull << 17)) != (3ull << 17))
    refused = "the OS does not enable the AMX tile state (XCR0 bits 17-18)";
  else
    refused = request_tile_data();
  if (why) *why = refused;
  return refused.empty() ? amx : 0;
}

// Cores a CFS quota allows: "quota period" (cgroup v2 cpu.max, or v1's two files joined),
// rounded up; 0 when there is no limit ("max", -1) or the text does not parse.
int cores_from_cpu_quota(const std::string& text) {
  std::istringstream in(text);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || period <= 0 || quota == "max") return 0;
  char* end = nullptr;
  const long long q = std::strtoll(quota.c_str(), &end, 10);
  if (*end || q <= 0) return 0;
  return int(std::min<long long>((q + period - 1) / period, 1 << 20));
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The CPU quota of this process's cgroup (v2, then v1), in cores; 0 = none.
int cgroup_quota_cores() {
  std::ifstream groups("/proc/self/cgroup");
  std::string line;
  while (std::getline(groups, line)) {
    // "0::/path" (v2) or "N:cpu,cpuacct:/path" (v1).
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    for (const std::string& dir : {path, std::string("/")}) {  // "/" inside a cgroup namespace
      if (controllers.empty()) {
        if (int n = cores_from_cpu_quota(read_text("/sys/fs/cgroup" + dir + "/cpu.max"))) return n;
      } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
        for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
          const std::string base = std::string(mount) + dir;
          const std::string quota = read_text(base + "/cpu.cfs_quota_us");
          const std::string period = read_text(base + "/cpu.cfs_period_us");
          if (int n = cores_from_cpu_quota(quota + " " + period)) return n;
        }
      }
    }
  }
  return 0;
}

}  // namespace

int usable_cores() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  int cores = n > 0 ? int(n) : 1;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
    cores = std::min(cores, int(CPU_COUNT(&set)));
  if (int quota = cgroup_quota_cores()) cores = std::min(cores, quota);
  return std::max(cores, 1);
}

namespace {

CpuInfo detect() {
  CpuInfo info;
  if (const char* off = std::getenv("CPUKERN_DISABLE_FEATURES")) {
    std::stringstream ss(off);
    std::string name;
    while (std::getline(ss, name, ',')) {
      const uint64_t bit = feature_from_name(name);
      if (!bit && !name.empty()) {
        // A typo would otherwise test the wrong configuration silently.
        std::string known = "amx";
        for (const auto& f : feature_names(~0ull)) known += ", " + f;
        std::fprintf(stderr, "cpukern: CPUKERN_DISABLE_FEATURES: unknown feature '%s' ignored; known: %s\n",
                     name.c_str(), known.c_str());
      }
      info.hidden |= bit;
    }
  }
#if defined(__x86_64__)
  detect_x86(info, info.hidden);
#elif defined(__aarch64__)
  detect_aarch64(info);
#endif
  info.num_cores = usable_cores();
  info.l2_bytes = detect_l2_bytes();
  info.l3_bytes = detect_l3_bytes();
  info.hidden &= info.features;  // only what this CPU reported counts as hidden
  info.features &= ~info.hidden;
  return info;
}

}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kX86_64: return "x86_64";
    case Arch::kAArch64: return "aarch64";
    default: return "other";
  }
}

std::vector<std::string> feature_names(uint64_t features) {
  std::vector<std::string> out;
  for (const auto& f : kFeatureNames)
    if (features & f.bit) out.push_back(f.name);
  return out;
}

uint64_t feature_from_name(const std::string& name) {
  if (name == "amx") return kAMX;
  for (const auto& f : kFeatureNames)
    if (name == f.name) return f.bit;
  return 0;
}

std::string why_missing(uint64_t missing) {
  const CpuInfo& info = cpu_info();
  std::string out;
  auto clause = [&](uint64_t bits, const std::string& why) {
    if (!bits) return;
    std::string names;
    for (const auto& n : feature_names(bits)) names += (names.empty() ? "" : ", ") + n;
    out += (out.empty() ? "" : "; ") + names + ": " + why;
    missing &= ~bits;
  };
  clause(missing & info.hidden, "hidden by CPUKERN_DISABLE_FEATURES");
  for (const auto& [bits, why] : info.unusable) clause(missing & bits, why);
  clause(missing, "not reported by this CPU");
  return out;
}

}  // namespace cpukern
