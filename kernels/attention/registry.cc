// The registry of the decode-attention op, from its kernel list
// (kernels/common/op_registry.inc).
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/attention/kernel_rows.h"

namespace cpukern::attention {

#define CPUKERN_KERNEL_LIST "kernels/attention/ukernels/ukernels.inc"
#define CPUKERN_LIST_ROW CPUKERN_ATTN_ROW
#define CPUKERN_OP_NAME "decode_attention"
#define CPUKERN_UKERNEL_TYPE Ukernel
#define CPUKERN_OP_ALIASES
#include "kernels/common/op_registry.inc"

std::vector<VariantInfo> list_variants() { return registry().info(); }

}  // namespace cpukern::attention
