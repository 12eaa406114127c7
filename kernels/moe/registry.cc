// The fused-MoE registry: its rows are the kernel list's (ukernels/ukernels.inc).
#include <vector>

#include "kernels/common/kernel_list.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/ukernel.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

namespace {
// The row's ukernel: the bf16 one, with its ukernel per format (the kernel list's columns).
Ukernel row(const Ukernel& bf16, const Ukernel& mxfp4, const Ukernel& int8) {
  Ukernel u = bf16;
  u.formats[int(WeightFormat::kBf16)] = &bf16;
  u.formats[int(WeightFormat::kMxfp4)] = &mxfp4;
  u.formats[int(WeightFormat::kInt8)] = &int8;
  return u;
}
}  // namespace

#define CPUKERN_VARIANT(arch, name, isa_key, priority, ukernel, mxfp4_ukernel, int8_ukernel) \
  CPUKERN_ON(arch, Variant{#name, isa::isa_key, priority, row(ukernel, mxfp4_ukernel, int8_ukernel)}, )

const Registry<Ukernel>& registry() {
  static const Registry<Ukernel> r("fused_moe", {
#include "kernels/moe/ukernels/ukernels.inc"
                                                });
  return r;
}

// No MoE micro-kernel is built against SIMDe yet, so there is no :simde library and no row.
// (With a simde row, a :simde library compiles this file again with isa = "simde_avx512" and
// this definition moves under #if defined(CPUKERN_SIMDE), as in the other ops.)
const std::vector<Variant>& simde_variants() {
  static const std::vector<Variant> rows;
  return rows;
}

std::vector<VariantInfo> list_variants() { return registry().info(); }

#undef CPUKERN_VARIANT

}  // namespace cpukern::moe
