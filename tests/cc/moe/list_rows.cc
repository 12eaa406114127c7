// Compiled twice: natively into :list_rows (list_rows()) and against SIMDe into :simde_rows
// (simde_variants()).
#include "tests/cc/moe/list_rows.h"

namespace cpukern::moe {

#define CPUKERN_KERNEL_LIST "kernels/moe/ukernels/ukernels.inc"
#define CPUKERN_LIST_ROW CPUKERN_MOE_ROW
#include "tests/cc/common/list_rows.inc"

}  // namespace cpukern::moe
