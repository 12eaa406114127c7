// The tests' rows of the decode-attention kernel list (list_rows.cc;
// tests/cc/common/list_rows.inc).
#pragma once
#include <vector>

#include "kernels/attention/kernel_rows.h"

namespace cpukern::attention {

// Every any/x86/arm line of the list, shipped and catalogue-only.
const std::vector<Variant>& list_rows();

}  // namespace cpukern::attention
