#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/aligned_buffer.h"
#include "kernels/common/bf16.h"
#include "kernels/common/cpu_features.h"
#include "kernels/common/limits.h"
#include "kernels/common/registry.h"
#include "kernels/common/ternary_codes.h"
#include "kernels/common/thread_pool.h"
#include "kernels/common/weight_memory.h"

namespace cpukern {
namespace {

TEST(CpuFeatures, DetectsTheArchitectureItWasBuiltFor) {
  const CpuInfo& info = cpu_info();
#if defined(__x86_64__)
  EXPECT_EQ(info.arch, Arch::kX86_64);
  EXPECT_EQ(info.features & kNEON, 0u);
  if (info.features & kAVX512F) {
    EXPECT_TRUE(info.features & kAVX2);
  }
  if (info.features & kFastPext) {
    EXPECT_TRUE(info.features & kBMI2);
  }
#elif defined(__aarch64__)
  EXPECT_EQ(info.arch, Arch::kAArch64);
  EXPECT_TRUE(info.features & kNEON);
  EXPECT_EQ(info.features & kAVX2, 0u);
#endif
  EXPECT_GE(info.num_cores, 1);
  EXPECT_GT(info.l2_bytes, 0);
  std::printf("cpu: %s, features:", arch_name(info.arch));
  for (const auto& f : feature_names(info.features)) std::printf(" %s", f.c_str());
  std::printf("\n");
}

TEST(CpuFeatures, QemuCpuModelIsVisible) {
  // The QEMU legs pass the -cpu model; check that detection follows it.
  const char* model = std::getenv("CPUKERN_QEMU_CPU");
  if (!model) GTEST_SKIP() << "not running under qemu-user (CPUKERN_QEMU_CPU unset)";
#if defined(__aarch64__)
  if (std::string(model) == "max") {
    EXPECT_TRUE(cpu_has(kBF16)) << "qemu -cpu max reports BF16";
  }
  if (std::string(model) == "neoverse-n1") {
    EXPECT_FALSE(cpu_has(kBF16)) << "N1 has no BF16";
  }
#endif
}

TEST(CpuFeatures, CpuQuotaParsing) {
  EXPECT_EQ(cores_from_cpu_quota("max 100000"), 0);
  EXPECT_EQ(cores_from_cpu_quota("50000 100000"), 1);
  EXPECT_EQ(cores_from_cpu_quota("150000 100000\n"), 2);
  EXPECT_EQ(cores_from_cpu_quota("-1 100000"), 0);  // cgroup v1: no limit
  EXPECT_EQ(cores_from_cpu_quota(""), 0);
  EXPECT_EQ(cores_from_cpu_quota("junk"), 0);
}

// The default thread count follows the affinity mask (taskset, container cpusets).
TEST(CpuFeatures, UsableCoresFollowsTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(usable_cores(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_GE(usable_cores(), 1);
  EXPECT_LE(usable_cores(), CPU_COUNT(&saved));
}

TEST(CpuFeatures, NamesRoundTrip) {
  for (const auto& name : feature_names(~0ull)) EXPECT_NE(feature_from_name(name), 0u) << name;
  EXPECT_EQ(feature_from_name("no-such-feature"), 0u);
}

struct FakeUkernel {
  const char* name;
};

Registry<FakeUkernel> fake_registry() {
  return Registry<FakeUkernel>("fake_op", {
                                              {"reference", 0, 0, {"fake__scalar"}},
                                              {"fast", 0, 10, {"fake__fast"}},
                                              {"impossible", ~0ull, 100, {"fake__never"}},
                                          });
}

TEST(Registry, SelectsTheHighestPrioritySupportedVariant) {
  auto reg = fake_registry();
  EXPECT_STREQ(reg.select().name, "fast");
  EXPECT_STREQ(reg.select("").name, "fast");
  EXPECT_STREQ(reg.select("reference").name, "reference");
}

TEST(Registry, ForcingAnUnsupportedVariantIsAnErrorNotASigill) {
  auto reg = fake_registry();
  try {
    reg.select("impossible");
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("variant: variant 'impossible'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(reg.select("nope"), InvalidArgument);
}

TEST(Registry, InfoListsEveryVariantAndTheSelectedOne) {
  auto reg = fake_registry();
  const auto info = reg.info();
  ASSERT_EQ(info.size(), 3u);
  int selected = 0;
  for (const auto& v : info) selected += v.selected;
  EXPECT_EQ(selected, 1);
  EXPECT_FALSE(info[2].supported);
}

TEST(Registry, EnvironmentOverride) {
  setenv("CPUKERN_VARIANT", "other_op=x,reference", 1);
  EXPECT_EQ(variant_override_from_env("fake_op", {"reference", "fast"}), "reference");
  EXPECT_EQ(variant_override_from_env("other_op", {"x"}), "x");
  setenv("CPUKERN_VARIANT", "fake_op=fast", 1);
  EXPECT_EQ(variant_override_from_env("fake_op", {"reference", "fast"}), "fast");
  setenv("CPUKERN_VARIANT", "avx9000", 1);
  EXPECT_EQ(variant_override_from_env("fake_op", {"reference", "fast"}), std::nullopt);
  // "op=" names the empty variant (refused by find), never "nothing forced".
  setenv("CPUKERN_VARIANT", "fake_op=", 1);
  EXPECT_EQ(variant_override_from_env("fake_op", {"reference", "fast"}), std::string());
  EXPECT_EQ(variant_override_from_env("other_op", {"reference"}), std::nullopt);
  unsetenv("CPUKERN_VARIANT");
}

TEST(ThreadPool, RunsEveryTaskOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> hits(1000);
    parallel_for(1000, threads, [&](int64_t i) { hits[i]++; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "threads=" << threads;
  }
  parallel_for(0, 4, [](int64_t) { FAIL(); });
}

TEST(ThreadPool, ConcurrentCallersAllComplete) {
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t)
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) parallel_for(64, 3, [&](int64_t i) { total += i; });
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 8 * 50 * (63 * 64 / 2));
}

// Helpers poll between calls, then sleep: calls back to back (polling), after a short pause
// (still polling) and after a pause past the polling time (asleep) each run every task once;
// so do calls while busy threads compete for the cores, and with polling off.
TEST(ThreadPool, PollingSleepingAndPreemptedHelpersRunEveryTask) {
  auto check = [](int rounds) {
    for (int r = 0; r < rounds; ++r) {
      std::vector<std::atomic<int>> hits(97);
      parallel_for(97, 2 + r % 3, [&](int64_t i) { hits[i]++; });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << r;
      if (r % 3 == 1) std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (r % 3 == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  check(60);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 4; ++t)
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  check(60);
  stop = true;
  for (auto& b : busy) b.join();
  set_polling(false);
  check(30);
  set_polling(true);
  check(10);
}

TEST(ThreadPool, SpinTimeSpellings) {
  EXPECT_EQ(spin_us_from_env(nullptr), 200);
  EXPECT_EQ(spin_us_from_env("0"), 0);
  EXPECT_EQ(spin_us_from_env(" 50 "), 50);
  EXPECT_EQ(spin_us_from_env("50\n"), 50);
  EXPECT_EQ(spin_us_from_env("99999999999999999999"), 100000);
  for (const char* bad : {"", "-5", "1e3", "abc", "5us", "+5"})
    EXPECT_EQ(spin_us_from_env(bad), 200) << bad;
}

TEST(ThreadPool, PropagatesExceptions) {
  EXPECT_THROW(parallel_for(100, 2, [](int64_t i) {
                 if (i == 37) throw std::runtime_error("boom");
               }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int> n{0};
  parallel_for(10, 2, [&](int64_t) { n++; });
  EXPECT_EQ(n.load(), 10);
}

// Waits up to `seconds` for child `pid`; kills it and returns -1 if it hangs.
int wait_child(pid_t pid, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The child of a fork has none of the parent's pool threads: a call there that needs more
// threads than the parent had used to wait forever on the parent's condition variable.
// qemu-user 7.2 itself aborts in the forked child of a multi-threaded guest (its own assertion
// in cpu_exec), whatever the guest does; the host leg covers these.
// ThreadSanitizer refuses to start threads in the child of a multi-threaded fork.
#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#define CPUKERN_SKIP_FORK_IF_UNSUPPORTED()                                                     \
  if (std::getenv("CPUKERN_QEMU_CPU"))                                                     \
    GTEST_SKIP() << "qemu-user 7.2 aborts in the forked child of a multi-threaded guest "  \
                    "(qemu's own assertion); fork safety is tested on the host leg";       \
  if (kTsan)                                                                               \
  GTEST_SKIP() << "ThreadSanitizer cannot start threads after a multi-threaded fork; "     \
                  "tested in the plain and ASan builds"

TEST(ThreadPool, ForkedChildrenGetAWorkingPool) {
  CPUKERN_SKIP_FORK_IF_UNSUPPORTED();
  for (int round = 0; round < 40; ++round) {
    const int parent_threads = 2 + round % 2, child_threads = 4 - round % 2;
    std::atomic<int> n{0};
    parallel_for(64, parent_threads, [&](int64_t) { n++; });
    ASSERT_EQ(n.load(), 64);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::atomic<int> m{0};
      for (int r = 0; r < 3; ++r) parallel_for(1000, child_threads, [&](int64_t) { m++; });
      _exit(m.load() == 3000 ? 0 : 1);
    }
    EXPECT_EQ(wait_child(pid, 60), 0) << "round " << round << ": child hung (-1) or failed";
  }
}

// A fork while another thread is inside a parallel job (the pool's locks held).
TEST(ThreadPool, ForkDuringAParallelJobInAnotherThread) {
  CPUKERN_SKIP_FORK_IF_UNSUPPORTED();
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop) parallel_for(256, 2, [](int64_t) { std::this_thread::yield(); });
  });
  for (int round = 0; round < 10; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::atomic<int> m{0};
      parallel_for(500, 3, [&](int64_t) { m++; });
      _exit(m.load() == 500 ? 0 : 1);
    }
    EXPECT_EQ(wait_child(pid, 60), 0) << "round " << round;
  }
  stop = true;
  busy.join();
}

TEST(Limits, OneThreadSemanticsForEveryOp) {
  EXPECT_EQ(limits::resolve_threads(0), get_num_threads());
  EXPECT_EQ(limits::resolve_threads(3), 3);
  EXPECT_EQ(limits::resolve_threads(limits::kMaxThreads), limits::kMaxThreads);
  for (int bad : {-1, limits::kMaxThreads + 1}) {
    try {
      limits::resolve_threads(bad);
      FAIL() << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("threads: expected 0 (the default) or 1..4096", 0), 0u)
          << e.what();
    }
  }
}

TEST(TernaryCodes, MasksMatchTheFormatBitByBit) {
  using namespace ternary_codes;
  std::mt19937 rng(7);
  for (int t = 0; t < 2000; ++t) {
    uint32_t word = 0;
    int w[16];
    for (int j = 0; j < 16; ++j) {
      w[j] = int(rng() % 3) - 1;
      word |= encode(w[j], j);
    }
    EXPECT_EQ(invalid_codes(word), 0u);
    uint32_t add = 0, sub = 0;
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(decode(word, j), w[j]);
      add |= uint32_t(w[j] > 0) << j;
      sub |= uint32_t(w[j] < 0) << j;
    }
    EXPECT_EQ(add_mask(word), add);
    EXPECT_EQ(sub_mask(word), sub);
    const int j = int(rng() % 16);
    EXPECT_EQ(invalid_codes(word | (3u << (2 * j))), 1u << (2 * j));
  }
  EXPECT_EQ(words_for(0), 0);
  EXPECT_EQ(words_for(16), 1);
  EXPECT_EQ(words_for(17), 2);
  EXPECT_EQ(past_mask(16), 0u);
  EXPECT_EQ(past_mask(0), ~0u);
  EXPECT_EQ(past_mask(3), ~0x3Fu);
}

// Catalogue rows are forced by name (an alias too, CPUKERN_VARIANT too) and nothing else: never
// the default, however high their priority, and never listed.
TEST(Registry, CatalogueRowsAreForcedByNameOnly) {
  Registry<FakeUkernel> reg("fake_op", {{"reference", 0, 0, {"fake__scalar"}}},
                            {{"paper", 0, 100, {"fake__paper"}},
                             {"paper_impossible", ~0ull, 100, {"fake__never"}}},
                            {{"old_paper", "paper"}});
  EXPECT_STREQ(reg.default_variant().name, "reference");
  EXPECT_STREQ(reg.select("paper").name, "paper");
  EXPECT_EQ(&reg.select("old_paper"), &reg.catalogue()[0]);
  EXPECT_EQ(reg.named("paper_impossible"), &reg.catalogue()[1]);
  EXPECT_EQ(reg.named("nope"), nullptr);
  EXPECT_THROW(reg.select("paper_impossible"), InvalidArgument);
  ASSERT_EQ(reg.info().size(), 1u);
  EXPECT_EQ(reg.info()[0].name, "reference");
  EXPECT_EQ(reg.all_rows().size(), 3u);
  const auto names = reg.names();
  EXPECT_NE(std::find(names.begin(), names.end(), "paper"), names.end());
  setenv("CPUKERN_VARIANT", "paper", 1);
  Registry<FakeUkernel> forced("fake_op", {{"reference", 0, 0, {"fake__scalar"}}},
                               {{"paper", 0, -1, {"fake__paper"}}});
  EXPECT_STREQ(forced.default_variant().name, "paper");
  unsetenv("CPUKERN_VARIANT");
}

TEST(Registry, AliasesAndMissingFeatures) {
  Registry<FakeUkernel> reg("fake_op",
                            {{"reference", 0, 0, {"fake__scalar"}},
                             {"impossible", ~0ull, 100, {"fake__never"}}},
                            {}, {{"old_name", "reference"}});
  EXPECT_STREQ(reg.select("old_name").name, "reference");
  EXPECT_STREQ(reg.select(std::string("reference")).name, "reference");
  EXPECT_THROW(reg.select(std::string("reference\0junk", 14)), InvalidArgument);
  EXPECT_TRUE(missing_features(reg.variants()[0]).empty());
  EXPECT_FALSE(missing_features(reg.variants()[1]).empty());
  const auto info = reg.info();
  EXPECT_EQ(info[1].missing, missing_features(reg.variants()[1]));
  EXPECT_TRUE(info[0].why.empty());
  EXPECT_EQ(info[1].why, why_missing(~0ull & ~cpu_info().features));
}

// Each AMX step failing makes AMX unusable and says why; the OS is asked only when CPUID and
// XCR0 allow it.
int tile_data_requests = 0;
std::string grant() {
  ++tile_data_requests;
  return "";
}
std::string refuse() {
  ++tile_data_requests;
  return "refused for the test";
}
TEST(CpuFeatures, AmxStepsEachMakeItUnusable) {
  const uint32_t all = 1u << 24 | 1u << 22 | 1u << 25;
  const uint64_t tile_state = 3ull << 17;
  std::string why = "x";
  EXPECT_EQ(usable_amx(all, tile_state, grant, &why), kAMX);
  EXPECT_EQ(why, "");
  EXPECT_EQ(tile_data_requests, 1);
  EXPECT_EQ(usable_amx(all, 1ull << 17, grant, &why), 0u);
  EXPECT_NE(why.find("XCR0"), std::string::npos) << why;
  EXPECT_EQ(tile_data_requests, 1) << "asked the OS without the tile state";
  EXPECT_EQ(usable_amx(all, tile_state, refuse, &why), 0u);
  EXPECT_EQ(why, "refused for the test");
  EXPECT_EQ(usable_amx(1u << 22 | 1u << 25, tile_state, grant, &why), 0u) << "no AMX-TILE";
  EXPECT_EQ(usable_amx(1u << 24 | 1u << 22, tile_state, grant, &why), kAMXTile | kAMXBF16);
  EXPECT_EQ(usable_amx(all, 0, nullptr, nullptr), kAMX) << "CPUID alone";
}

// AMX: "amx" names the three bits (CPUKERN_DISABLE_FEATURES=amx), AMX-BF16 and AMX-INT8 never
// without AMX-TILE, and a missing AMX says why (no CPUID bit, XCR0, or Linux's permission).
TEST(CpuFeatures, AmxBitsAndWhyMissing) {
  EXPECT_EQ(feature_from_name("amx"), kAMX);
  EXPECT_EQ(feature_from_name("amx_tile"), kAMXTile);
  const CpuInfo& info = cpu_info();
  if (info.features & (kAMXBF16 | kAMXINT8)) {
    EXPECT_TRUE(info.features & kAMXTile);
  }
  if (info.features & kAMX) {
    EXPECT_TRUE(info.features & kAVX512F);
  }
  const uint64_t lacking = kAMX & ~info.features;
  if (lacking) {
    const std::string why = why_missing(lacking);
    EXPECT_NE(why.find("amx_"), std::string::npos) << why;
    std::printf("AMX here: %s\n", why.c_str());
  } else {
    EXPECT_EQ(why_missing(0), "");
    std::printf("AMX here: usable (tile data permitted)\n");
  }
}

TEST(Bf16, RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);   // halfway, even stays
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);   // halfway, odd rounds up
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
}

}  // namespace
}  // namespace cpukern

// Small buffers: 64-byte aligned. Prepared-weight sizes: 2 MiB aligned and, natively on Linux
// x86, advised as huge pages (the "hg" VmFlag of the mapping in /proc/self/smaps), unless
// CPUKERN_HUGEPAGES=0. Every byte zero either way.
bool advised_huge(const void* p) {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return false;
  char line[512];
  bool inside = false, hg = false;
  const auto a = reinterpret_cast<uintptr_t>(p);
  while (std::fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && std::strchr(line, '-') < std::strchr(line, ' ')) {
      inside = a >= lo && a < hi;
    } else if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
      hg = std::strstr(line, " hg") != nullptr;
      break;
    }
  }
  std::fclose(f);
  return hg;
}

// CPUKERN_HUGEPAGES is read with the Python package's spellings (cpukern/__init__.py): before,
// only "0" turned huge pages off and "no" / "off" left them on silently.
TEST(AlignedBuffer, HugePagesSpellings) {
  using cpukern::huge_pages_allowed;
  for (const char* off : {"0", "no", "off", "false", "NO", "Off", "FALSE", " no ", "off\n"})
    EXPECT_FALSE(huge_pages_allowed(off)) << off;
  for (const char* on : {"1", "yes", "on", "true", "", "nope", "00", "offline", "falsehood"})
    EXPECT_TRUE(huge_pages_allowed(on)) << on;
  EXPECT_TRUE(huge_pages_allowed(nullptr));
}

TEST(AlignedBuffer, AlignmentZeroingAndHugePageAdvice) {
  const char* env = std::getenv("CPUKERN_HUGEPAGES");
  const bool huge = cpukern::huge_pages_allowed(env);
  for (size_t n : {size_t(1), size_t(100), cpukern::AlignedBuffer::kHugeFrom - 64,
                   cpukern::AlignedBuffer::kHugeFrom, cpukern::AlignedBuffer::kHugeFrom * 3 + 7}) {
    cpukern::AlignedBuffer b(n);
    ASSERT_EQ(b.size(), n);
    const auto addr = reinterpret_cast<uintptr_t>(b.data());
    const bool big = n >= cpukern::AlignedBuffer::kHugeFrom;
    EXPECT_EQ(addr % (big && huge ? cpukern::kHugePage : 64), 0u) << n;
    const auto* c = b.data<unsigned char>();
    size_t nonzero = 0;
    for (size_t i = 0; i < n; ++i) nonzero += c[i] != 0;
    EXPECT_EQ(nonzero, 0u) << n;
#if defined(__linux__) && defined(__x86_64__)
    EXPECT_EQ(advised_huge(b.data()), big && huge) << n;
#endif
  }
}

// Packed weights: every buffer from 64 KiB in huge pages (shared chunks, or a block of its own
// from kDedicatedFrom), chunks freed with their last buffer; smaller ones from aligned_alloc.
namespace {
using cpukern::WeightMemory;

void fill(void* p, size_t n, unsigned char v) { std::memset(p, v, n); }
bool holds(const void* p, size_t n, unsigned char v) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    if (c[i] != v) return false;
  return true;
}
}  // namespace

TEST(WeightMemory, BuffersShareHugePageChunksAndFreeThem) {
  const bool huge = cpukern::huge_pages_enabled();
  const WeightMemory::Stats before = WeightMemory::stats();
  // 40 layer-sized buffers (300 KiB, 12 MiB in all): one chunk, each 4 KiB aligned, their bytes their own.
  std::vector<void*> bufs;
  const size_t n = 300 << 10;
  for (int i = 0; i < 40; ++i) {
    bufs.push_back(WeightMemory::allocate(n));
    fill(bufs.back(), n, static_cast<unsigned char>(i + 1));
  }
  for (int i = 0; i < 40; ++i) {
    const auto addr = reinterpret_cast<uintptr_t>(bufs[i]);
    EXPECT_EQ(addr % (huge ? WeightMemory::kAlign : 64), 0u) << i;
    EXPECT_TRUE(holds(bufs[i], n, static_cast<unsigned char>(i + 1))) << i;
#if defined(__linux__) && defined(__x86_64__)
    EXPECT_EQ(advised_huge(bufs[i]), huge) << i;
#endif
  }
  const WeightMemory::Stats during = WeightMemory::stats();
  EXPECT_EQ(during.chunks - before.chunks, huge ? 1u : 0u);
  EXPECT_EQ(during.live - before.live, huge ? 40u : 0u);
  for (void* p : bufs) WeightMemory::release(p);
  EXPECT_EQ(WeightMemory::stats().chunks, before.chunks);
  // Buffers just under a quarter chunk: four fill a chunk, the fifth starts another; the first
  // chunk is freed with its last buffer.
  std::vector<void*> big;
  const size_t quarter = WeightMemory::kChunk / 4 - cpukern::kHugePage / 2;
  static_assert(WeightMemory::kChunk / 4 - cpukern::kHugePage / 2 < WeightMemory::kDedicatedFrom);
  for (int i = 0; i < 5; ++i) big.push_back(WeightMemory::allocate(quarter));
  EXPECT_EQ(WeightMemory::stats().chunks - before.chunks, huge ? 2u : 0u);
  for (int i = 0; i < 4; ++i) WeightMemory::release(big[i]);
  EXPECT_EQ(WeightMemory::stats().chunks - before.chunks, huge ? 1u : 0u);
  WeightMemory::release(big[4]);
  const WeightMemory::Stats after = WeightMemory::stats();
  EXPECT_EQ(after.chunks, before.chunks);
  EXPECT_EQ(after.chunk_bytes, before.chunk_bytes);
  EXPECT_EQ(after.live, before.live);
}

TEST(WeightMemory, SmallAndDedicatedBuffers) {
  const bool huge = cpukern::huge_pages_enabled();
  const WeightMemory::Stats before = WeightMemory::stats();
  for (size_t n : {size_t(0), size_t(1), WeightMemory::kArenaFrom - 64,
                   WeightMemory::kDedicatedFrom + 7, WeightMemory::kChunk * 2 + 4096}) {
    void* p = WeightMemory::allocate(n);
    ASSERT_NE(p, nullptr) << n;
    const bool arena = huge && n >= WeightMemory::kArenaFrom;
    const auto addr = reinterpret_cast<uintptr_t>(p);
    EXPECT_EQ(addr % (arena ? cpukern::kHugePage : 64), 0u) << n;
    EXPECT_EQ(WeightMemory::stats().chunks - before.chunks, arena ? 1u : 0u) << n;
    fill(p, n, 0x5a);
    EXPECT_TRUE(holds(p, n, 0x5a)) << n;
#if defined(__linux__) && defined(__x86_64__)
    EXPECT_EQ(advised_huge(p), arena) << n;
#endif
    WeightMemory::release(p);
    EXPECT_EQ(WeightMemory::stats().chunks, before.chunks) << n;
  }
  WeightMemory::release(nullptr);
}

// Threads allocating and releasing at once (TSan checks the arena's lock): every buffer keeps
// its own bytes, and every chunk is freed at the end.
TEST(WeightMemory, ConcurrentAllocationsKeepTheirBytes) {
  const WeightMemory::Stats before = WeightMemory::stats();
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &bad] {
      std::mt19937 rng{uint32_t(t)};
      struct Held {
        void* p;
        size_t n;
        unsigned char v;
      };
      std::vector<Held> held;
      for (int i = 0; i < 200; ++i) {
        if (!held.empty() && rng() % 3 == 0) {
          const size_t j = rng() % held.size();
          bad += !holds(held[j].p, held[j].n, held[j].v);
          WeightMemory::release(held[j].p);
          held[j] = held.back();
          held.pop_back();
        } else {
          const size_t n = (16 << 10) + rng() % (1 << 20);
          held.push_back({WeightMemory::allocate(n), n, static_cast<unsigned char>(t * 50 + i % 50)});
          fill(held.back().p, n, held.back().v);
        }
      }
      for (const Held& h : held) {
        bad += !holds(h.p, h.n, h.v);
        WeightMemory::release(h.p);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(WeightMemory::stats().chunks, before.chunks);
  EXPECT_EQ(WeightMemory::stats().live, before.live);
}

TEST(WeightBuffer, ZeroedAndMovable) {
  for (size_t n : {size_t(1), size_t(100 << 10), size_t(9 << 20)}) {
    cpukern::WeightBuffer b(n);
    ASSERT_EQ(b.size(), n);
    EXPECT_TRUE(holds(b.data(), n, 0)) << n;
    fill(b.data(), n, 7);
    cpukern::WeightBuffer c(std::move(b));
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_TRUE(holds(c.data(), n, 7)) << n;
    c.resize(n);
    EXPECT_TRUE(holds(c.data(), n, 0)) << n;
  }
}
