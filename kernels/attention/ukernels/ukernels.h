// Declarations of the decode-attention micro-kernels, expanded from the kernel list
// (ukernels.inc).
#pragma once
#include "kernels/attention/ukernel.h"
#include "kernels/common/kernel_list.h"

namespace cpukern::attention {

#define CPUKERN_ATTN_DECL_KERNELS(f32, bf16) \
  void f32(const Chunk& c);                  \
  void bf16(const Chunk& c);
#define CPUKERN_VARIANT(arch, name, isakey, priority, kernels) \
  CPUKERN_DECLARE(arch, CPUKERN_ATTN_DECL_##kernels)
#define CPUKERN_CATALOGUE_ONLY CPUKERN_VARIANT
#define CPUKERN_PACKER(...)
#include "kernels/attention/ukernels/ukernels.inc"
#undef CPUKERN_VARIANT
#undef CPUKERN_CATALOGUE_ONLY
#undef CPUKERN_PACKER

}  // namespace cpukern::attention
