// The fused-MoE registry: one table, rows per architecture.
#include <vector>

#include "kernels/moe/moe.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {
namespace {

Variant row(const char* name, uint64_t required, int priority, const Ukernel& uk) {
  Variant v;
  v.name = name;
  v.required = required;
  v.priority = priority;
  v.ukernel = uk;
  return v;
}

const std::vector<Variant>& table() {
  static const std::vector<Variant> rows = {
#if defined(__x86_64__)
      row("avx512_bf16", kAVX512F | kAVX512BW | kAVX512VL | kAVX512BF16, 30, kUkernelAvx512Bf16),
      row("avx2", kAVX2 | kFMA, 20, kUkernelAvx2Fma),
#endif
#if defined(__aarch64__)
      row("neon_bf16_bfmmla", kNEON | kBF16, 30, kUkernelNeonBfmmla),
      row("neon", kNEON, 20, kUkernelNeonFma),
#endif
      row("reference", 0, 0, kUkernelScalar),
  };
  return rows;
}

}  // namespace

const Registry<Ukernel>& registry() {
  static const Registry<Ukernel> r("fused_moe", std::vector<cpukern::Variant<Ukernel>>(
                                              table().begin(), table().end()));
  return r;
}

const Variant& variant_row(const cpukern::Variant<Ukernel>& v) {
  const auto& vs = registry().variants();
  return table()[size_t(&v - vs.data())];
}

std::vector<VariantInfo> list_variants() { return registry().info(); }

}  // namespace cpukern::moe
