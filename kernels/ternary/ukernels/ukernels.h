// Declarations of every micro-kernel and packer of the kernel list (ukernels.inc).
#pragma once
#include "kernels/common/kernel_list.h"
#include "kernels/ternary/ukernel.h"

namespace cpukern::ternary {

#define CPUKERN_VARIANT(arch, row, isa, priority, f32, i8) \
  CPUKERN_DECLARE(arch, extern const F32Ukernel f32; extern const I8Ukernel i8;)
#define CPUKERN_CATALOGUE_ONLY CPUKERN_VARIANT
#define CPUKERN_PACKER(arch, layout, isa, packer) CPUKERN_DECLARE(arch, extern const Packer packer;)
#include "kernels/ternary/ukernels/ukernels.inc"
#undef CPUKERN_VARIANT
#undef CPUKERN_CATALOGUE_ONLY
#undef CPUKERN_PACKER

}  // namespace cpukern::ternary
