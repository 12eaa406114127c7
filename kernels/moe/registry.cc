// The fused-MoE registry (shipped rows and catalogue), from the kernel list
// (kernels/common/op_registry.inc).
#include <vector>

#include "kernels/moe/kernel_rows.h"

namespace cpukern::moe {

#define CPUKERN_KERNEL_LIST "kernels/moe/ukernels/ukernels.inc"
#define CPUKERN_LIST_ROW CPUKERN_MOE_ROW
#define CPUKERN_OP_NAME "fused_moe"
#define CPUKERN_UKERNEL_TYPE Ukernel
#define CPUKERN_OP_ALIASES
#include "kernels/common/op_registry.inc"

std::vector<VariantInfo> list_variants() {
  std::vector<VariantInfo> out = registry().info();
  for (auto& info : out)
    for (const auto& v : registry().variants())
      if (info.name == v.name && v.ukernel.tiles) info.tiles_min_rows = v.ukernel.tiles_min_rows;
  return out;
}

}  // namespace cpukern::moe
