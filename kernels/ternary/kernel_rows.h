// A row line of the ternary kernel list (ukernels/ukernels.inc) as a Variant: what the
// registry, its catalogue and the tests' tables expand the list with (CPUKERN_LIST_ROW).
#pragma once
#include "kernels/common/isa.h"
#include "kernels/common/kernel_list.h"
#include "kernels/ternary/ukernels/ukernels.h"

#define CPUKERN_TERNARY_ROW(arch, row, isa_key, priority, f32, i8)                       \
  CPUKERN_ON(arch,                                                                      \
             ::cpukern::ternary::Variant{#row, ::cpukern::isa::isa_key, priority,       \
                                         {f32.name, f32, i8}}, )
