// Compiled twice: natively into :list_rows (list_rows()) and against SIMDe into :simde_rows
// (simde_variants()).
#include "tests/cc/widely_linear/list_rows.h"

namespace cpukern::widely_linear {

#define CPUKERN_KERNEL_LIST "kernels/widely_linear/ukernels/ukernels.inc"
#define CPUKERN_LIST_ROW CPUKERN_WL_ROW
#include "tests/cc/common/list_rows.inc"

}  // namespace cpukern::widely_linear
