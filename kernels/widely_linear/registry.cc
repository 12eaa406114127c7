// The registry (shipped rows and catalogue) and packers of the widely-linear op, from the
// kernel list (kernels/common/op_registry.inc).
#include <vector>

#include "kernels/widely_linear/kernel_rows.h"

namespace cpukern::widely_linear {

#define CPUKERN_KERNEL_LIST "kernels/widely_linear/ukernels/ukernels.inc"
#define CPUKERN_LIST_ROW CPUKERN_WL_ROW
#define CPUKERN_OP_NAME "widely_linear"
#define CPUKERN_UKERNEL_TYPE Ukernel
#define CPUKERN_PACKER_TYPE Packer
#define CPUKERN_PACKER_ROW(layout, isakey, fn) Packer{#fn, &layouts::layout, isa::isakey, fn}
#include "kernels/common/op_registry.inc"

std::vector<VariantInfo> list_variants() { return registry().info(); }

}  // namespace cpukern::widely_linear
