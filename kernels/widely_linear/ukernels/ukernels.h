// Declarations of the widely-linear micro-kernels and packers, expanded from the kernel list
// (ukernels.inc). Names: <op>_<out>_<layout>_<MR>x<NR>__<isa>; "t2p16x4" = the public 2-bit
// layout (16 weights per uint32) of the 4 planes, "g3r8x4" / "g4r16x4" = R-row lanes and
// G-column lookups (lookup_layout.h), "gemv" = the single sub-GEMV of the naive schedule,
// "signed_1x8" = the 2..4 batch-row kernel; packers: <op>_pack_<layout>__<isa>.
#pragma once
#include "kernels/common/kernel_list.h"
#include "kernels/widely_linear/ukernel.h"

// Helpers of the micro-kernels are always inlined into them (their loops are unrolled there).
#define CPUKERN_WL_INLINE inline __attribute__((always_inline))

namespace cpukern::widely_linear {

#define CPUKERN_WL_DECL_KERNELS(layout, mr, fused, gemv) \
  void fused(const Call& c);                             \
  void gemv(const Call& c);
#define CPUKERN_WL_DECL_KERNELS_BATCHED(layout, mr, fused, gemv, batched, brows) \
  CPUKERN_WL_DECL_KERNELS(layout, mr, fused, gemv)                               \
  void batched(const Call& c);
#define CPUKERN_VARIANT(arch, name, isakey, priority, kernels) \
  CPUKERN_DECLARE(arch, CPUKERN_WL_DECL_##kernels)
#define CPUKERN_PACKER(arch, layout, isakey, fn) \
  CPUKERN_DECLARE(arch, void fn(const uint32_t* planes, const Dims& d, void* out);)
#define CPUKERN_CATALOGUE_ONLY CPUKERN_VARIANT
#include "kernels/widely_linear/ukernels/ukernels.inc"
#undef CPUKERN_VARIANT
#undef CPUKERN_CATALOGUE_ONLY
#undef CPUKERN_PACKER

}  // namespace cpukern::widely_linear
