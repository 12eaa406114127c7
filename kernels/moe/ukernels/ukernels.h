// Declarations of every fused-MoE micro-kernel, expanded from the kernel list.
#pragma once
#include "kernels/common/kernel_list.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {

#define CPUKERN_VARIANT(arch, name, isa, priority, ukernel, mxfp4_ukernel, int8_ukernel, \
                        w4a8_ukernel)                                                       \
  CPUKERN_DECLARE(arch, extern const Ukernel ukernel; extern const Ukernel mxfp4_ukernel;    \
                  extern const Ukernel int8_ukernel; extern const Ukernel w4a8_ukernel;)
#define CPUKERN_CATALOGUE_ONLY CPUKERN_VARIANT
#include "kernels/moe/ukernels/ukernels.inc"
#undef CPUKERN_VARIANT
#undef CPUKERN_CATALOGUE_ONLY

}  // namespace cpukern::moe
