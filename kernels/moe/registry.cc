// The fused-MoE registry: its rows are the kernel list's (ukernels/ukernels.inc); compiled
// again with CPUKERN_SIMDE into :simde (simde_variants(), the SIMDe rows).
#include <vector>

#include "kernels/common/kernel_list.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/ukernel.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

namespace {
// The row's ukernel: the bf16 one, with its ukernel per format (the kernel list's columns).
Ukernel row(const Ukernel& bf16, const Ukernel& mxfp4, const Ukernel& int8,
            const Ukernel& w4a8) {
  Ukernel u = bf16;
  u.formats[int(WeightFormat::kBf16)] = &bf16;
  u.formats[int(WeightFormat::kMxfp4)] = &mxfp4;
  u.formats[int(WeightFormat::kInt8)] = &int8;
  u.formats[int(WeightFormat::kMxfp4A8)] = &w4a8;
  return u;
}
}  // namespace

#define CPUKERN_VARIANT(arch, name, isa_key, priority, ukernel, mxfp4_ukernel, int8_ukernel, \
                        w4a8_ukernel)                                                        \
  CPUKERN_ON(arch,                                                                            \
             Variant{#name, isa::isa_key, priority,                                           \
                     row(ukernel, mxfp4_ukernel, int8_ukernel, w4a8_ukernel)}, )
#define CPUKERN_CATALOGUE_ONLY(arch, name, isa_key, priority, ukernel, mxfp4_ukernel,        \
                               int8_ukernel, w4a8_ukernel)                                   \
  CPUKERN_ON(arch,                                                                            \
             Variant{#name, isa::isa_key, priority,                                           \
                     row(ukernel, mxfp4_ukernel, int8_ukernel, w4a8_ukernel), false}, )

#if defined(CPUKERN_SIMDE)
// The :simde library's compile of this file: the kernel list's simde rows (tests only).
const std::vector<Variant>& simde_variants() {
  static const std::vector<Variant> rows = {
#include "kernels/moe/ukernels/ukernels.inc"
  };
  return rows;
}
#else
const Registry<Ukernel>& registry() {
  static const Registry<Ukernel> r("fused_moe", {
#include "kernels/moe/ukernels/ukernels.inc"
                                                });
  return r;
}

std::vector<VariantInfo> list_variants() {
  std::vector<VariantInfo> out = registry().info();
  for (auto& info : out)
    for (const auto& v : registry().variants())
      if (info.name == v.name && v.ukernel.tiles) info.tiles_min_rows = v.ukernel.tiles_min_rows;
  return out;
}
#endif

#undef CPUKERN_VARIANT
#undef CPUKERN_CATALOGUE_ONLY

}  // namespace cpukern::moe
