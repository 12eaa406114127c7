// Compiled twice: natively into :list_rows (list_rows()) and against SIMDe into :simde_rows
// (simde_variants()).
#include "tests/cc/ternary/list_rows.h"

namespace cpukern::ternary {

#define CPUKERN_KERNEL_LIST "kernels/ternary/ukernels/ukernels.inc"
#define CPUKERN_LIST_ROW CPUKERN_TERNARY_ROW
#include "tests/cc/common/list_rows.inc"

}  // namespace cpukern::ternary
