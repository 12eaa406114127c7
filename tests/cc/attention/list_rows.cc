#include "tests/cc/attention/list_rows.h"

namespace cpukern::attention {

#define CPUKERN_KERNEL_LIST "kernels/attention/ukernels/ukernels.inc"
#define CPUKERN_LIST_ROW CPUKERN_ATTN_ROW
#include "tests/cc/common/list_rows.inc"

}  // namespace cpukern::attention
