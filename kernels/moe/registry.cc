// The fused-MoE registry (shipped rows and catalogue), from the kernel list
// (kernels/common/op_registry.inc), and the dense layer's (op "linear"), of the same rows.
#include <string>
#include <vector>

#include "kernels/moe/kernel_rows.h"

namespace cpukern::moe {

#define CPUKERN_KERNEL_LIST "kernels/moe/ukernels/ukernels.inc"
#define CPUKERN_LIST_ROW CPUKERN_MOE_ROW
#define CPUKERN_OP_NAME "fused_moe"
#define CPUKERN_UKERNEL_TYPE GemmConfig
#define CPUKERN_OP_ALIASES
#include "kernels/common/op_registry.inc"

// The dense layer's registry: fused_moe's rows, copied once under the op name "linear" (the
// same kernel list; nothing about a row differs for one expert without routing).
const Registry<GemmConfig>& linear_registry() {
  static const Registry<GemmConfig> r("linear", registry().variants(), registry().catalogue());
  return r;
}

// `r`'s listing, with the AMX rows' tiles_min_rows (their bf16 ukernel's).
static std::vector<VariantInfo> variants_of(const Registry<GemmConfig>& r) {
  std::vector<VariantInfo> out = r.info();
  for (auto& info : out)
    for (const auto& v : r.variants())
      if (info.name == v.name && v.ukernel.bf16().tiles)
        info.tiles_min_rows = v.ukernel.bf16().tiles_min_rows;
  return out;
}

std::vector<VariantInfo> list_variants() { return variants_of(registry()); }
std::vector<VariantInfo> list_linear_variants() { return variants_of(linear_registry()); }

std::string linear_variant(const std::string& variant) {
  return linear_registry().select(variant).name;
}

}  // namespace cpukern::moe
