// The registry rows, packers and SIMDe rows of the widely-linear op, from the kernel list
// (kernels/common/op_registry.inc). Compiled twice: into :widely_linear (registry(),
// packers()) and, with CPUKERN_SIMDE, into :simde (simde_variants()).
#include <vector>

#include "kernels/common/isa.h"
#include "kernels/widely_linear/ukernel.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

#define CPUKERN_WL_ROW_KERNELS(layout, mr, fused, gemv) \
  Ukernel { #fused, #gemv, &layouts::layout, mr, fused, gemv, nullptr, 0 }
#define CPUKERN_WL_ROW_KERNELS_BATCHED(layout, mr, fused, gemv, batched, brows) \
  Ukernel { #fused, #gemv, &layouts::layout, mr, fused, gemv, batched, brows }
#define CPUKERN_VARIANT(arch, name, isakey, priority, kernels) \
  CPUKERN_ON(arch, Variant{#name, isa::isakey, priority, CPUKERN_WL_ROW_##kernels},)
#define CPUKERN_CATALOGUE_ONLY(arch, name, isakey, priority, kernels) \
  CPUKERN_ON(arch, Variant{#name, isa::isakey, priority, CPUKERN_WL_ROW_##kernels, false},)

#define CPUKERN_KERNEL_LIST "kernels/widely_linear/ukernels/ukernels.inc"
#define CPUKERN_OP_NAME "widely_linear"
#define CPUKERN_UKERNEL_TYPE Ukernel
#define CPUKERN_PACKER_TYPE Packer
#define CPUKERN_PACKER_ROW(layout, isakey, fn) Packer{#fn, &layouts::layout, isa::isakey, fn}
#include "kernels/common/op_registry.inc"

}  // namespace cpukern::widely_linear
