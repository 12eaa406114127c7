// A row line of the decode-attention kernel list (ukernels/ukernels.inc) as a Variant: what
// the registry and the tests' tables expand the list with (CPUKERN_LIST_ROW).
#pragma once
#include "kernels/attention/ukernel.h"
#include "kernels/attention/ukernels/ukernels.h"
#include "kernels/common/isa.h"
#include "kernels/common/kernel_list.h"

#define CPUKERN_ATTN_ROW_KERNELS(f32, bf16) \
  ::cpukern::attention::Ukernel { #f32, f32, bf16 }
#define CPUKERN_ATTN_ROW(arch, name, isakey, priority, kernels)                           \
  CPUKERN_ON(arch,                                                                        \
             ::cpukern::attention::Variant{#name, ::cpukern::isa::isakey, priority,       \
                                           CPUKERN_ATTN_ROW_##kernels}, )
