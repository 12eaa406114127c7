// The tests' rows of the widely_linear kernel list (list_rows.cc; tests/cc/common/list_rows.inc).
#pragma once
#include <vector>

#include "kernels/widely_linear/kernel_rows.h"

namespace cpukern::widely_linear {

// Every any/x86/arm line of the list, shipped and catalogue-only (:list_rows).
const std::vector<Variant>& list_rows();
// The simde lines: the AVX-512 sources built against SIMDe (:simde_rows).
const std::vector<Variant>& simde_variants();

}  // namespace cpukern::widely_linear
