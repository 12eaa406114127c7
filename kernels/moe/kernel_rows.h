// A row line of the fused-MoE kernel list (ukernels/ukernels.inc) as a Variant: what the
// registry, its catalogue and the tests' tables expand the list with (CPUKERN_LIST_ROW).
#pragma once
#include "kernels/common/isa.h"
#include "kernels/common/kernel_list.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/ukernel.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {

// The row's GEMM config: its ukernel per format (the kernel list's columns, WeightFormat order).
inline GemmConfig list_row(const Ukernel& bf16, const Ukernel& mxfp4, const Ukernel& int8,
                           const Ukernel& w4a8) {
  return GemmConfig{bf16.name, {&bf16, &mxfp4, &int8, &w4a8}};
}

}  // namespace cpukern::moe

#define CPUKERN_MOE_ROW(arch, name, isa_key, priority, ukernel, mxfp4_ukernel, int8_ukernel, \
                        w4a8_ukernel)                                                        \
  CPUKERN_ON(arch,                                                                            \
             ::cpukern::moe::Variant{#name, ::cpukern::isa::isa_key, priority,                \
                                     ::cpukern::moe::list_row(ukernel, mxfp4_ukernel,         \
                                                              int8_ukernel, w4a8_ukernel)}, )
