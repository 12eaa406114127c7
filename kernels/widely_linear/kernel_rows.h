// A row line of the widely-linear kernel list (ukernels/ukernels.inc) as a Variant: what the
// registry, its catalogue and the tests' tables expand the list with (CPUKERN_LIST_ROW).
#pragma once
#include "kernels/common/isa.h"
#include "kernels/common/kernel_list.h"
#include "kernels/widely_linear/ukernel.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

#define CPUKERN_WL_ROW_KERNELS(layout, mr, fused, gemv)                                    \
  ::cpukern::widely_linear::Ukernel {                                                    \
    #fused, #gemv, &::cpukern::widely_linear::layouts::layout, mr, fused, gemv, nullptr, 0 \
  }
#define CPUKERN_WL_ROW_KERNELS_BATCHED(layout, mr, fused, gemv, batched, brows)              \
  ::cpukern::widely_linear::Ukernel {                                                      \
    #fused, #gemv, &::cpukern::widely_linear::layouts::layout, mr, fused, gemv, batched, brows \
  }
#define CPUKERN_WL_ROW(arch, name, isakey, priority, kernels)                          \
  CPUKERN_ON(arch,                                                                     \
             ::cpukern::widely_linear::Variant{#name, ::cpukern::isa::isakey, priority, \
                                               CPUKERN_WL_ROW_##kernels}, )
