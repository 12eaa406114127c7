#include <atomic>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/bf16.h"
#include "kernels/common/cpu_features.h"
#include "kernels/common/registry.h"
#include "kernels/common/thread_pool.h"

namespace cpukern {
namespace {

TEST(CpuFeatures, DetectsTheArchitectureItWasBuiltFor) {
  const CpuInfo& info = cpu_info();
#if defined(__x86_64__)
  EXPECT_EQ(info.arch, Arch::kX86_64);
  EXPECT_EQ(info.features & kNEON, 0u);
  if (info.features & kAVX512F) EXPECT_TRUE(info.features & kAVX2);
  if (info.features & kFastPext) EXPECT_TRUE(info.features & kBMI2);
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
  if (std::string(model) == "max") EXPECT_TRUE(cpu_has(kBF16)) << "qemu -cpu max reports BF16";
  if (std::string(model) == "neoverse-n1") EXPECT_FALSE(cpu_has(kBF16)) << "N1 has no BF16";
#endif
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
    EXPECT_NE(std::string(e.what()).find("isa: variant 'impossible'"), std::string::npos) << e.what();
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
  setenv("CPUKERN_ISA", "other_op=x,reference", 1);
  EXPECT_EQ(isa_override_from_env("fake_op", {"reference", "fast"}), "reference");
  EXPECT_EQ(isa_override_from_env("other_op", {"x"}), "x");
  setenv("CPUKERN_ISA", "fake_op=fast", 1);
  EXPECT_EQ(isa_override_from_env("fake_op", {"reference", "fast"}), "fast");
  setenv("CPUKERN_ISA", "avx9000", 1);
  EXPECT_EQ(isa_override_from_env("fake_op", {"reference", "fast"}), "");
  unsetenv("CPUKERN_ISA");
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
