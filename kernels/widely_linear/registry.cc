// The registry rows, packers and SIMDe rows of the widely-linear op, from the kernel list
// (ukernels/ukernels.inc). Compiled twice: into :widely_linear (registry(), packers()) and,
// with CPUKERN_SIMDE, into :simde (simde_variants()).
#include <vector>

#include "kernels/common/isa.h"
#include "kernels/widely_linear/ukernel.h"
#include "kernels/widely_linear/ukernels/ukernels.h"

namespace cpukern::widely_linear {

#define CPUKERN_WL_ROW_KERNELS(layout, mr, fused, gemv) \
  Ukernel { #fused, #gemv, &layouts::layout, mr, fused, gemv, nullptr, 0 }
#define CPUKERN_WL_ROW_KERNELS_BATCHED(layout, mr, fused, gemv, batched, brows) \
  Ukernel { #fused, #gemv, &layouts::layout, mr, fused, gemv, batched, brows }
#define CPUKERN_VARIANT(arch, name, isakey, priority, kernels) \
  CPUKERN_ON(arch, Variant{#name, isa::isakey, priority, CPUKERN_WL_ROW_##kernels},)
#define CPUKERN_CATALOGUE_ONLY(arch, name, isakey, priority, kernels) \
  CPUKERN_ON(arch, Variant{#name, isa::isakey, priority, CPUKERN_WL_ROW_##kernels, false},)

#define CPUKERN_PACKER(arch, layout, isakey, fn)

#if defined(CPUKERN_SIMDE)

const std::vector<Variant>& simde_variants() {
  static const std::vector<Variant> rows = {
#include "kernels/widely_linear/ukernels/ukernels.inc"
  };
  return rows;
}

#else

const Registry<Ukernel>& registry() {
  // isa="avx2_bmi2" (a row until the pext packer became a packer) still selects avx2.
  static const Registry<Ukernel> reg("widely_linear",
                                     {
#include "kernels/widely_linear/ukernels/ukernels.inc"
                                     },
                                     {{"avx2_bmi2", "avx2"}});
  return reg;
}

#undef CPUKERN_VARIANT
#undef CPUKERN_CATALOGUE_ONLY
#undef CPUKERN_PACKER
#define CPUKERN_VARIANT(arch, name, isakey, priority, kernels)
#define CPUKERN_CATALOGUE_ONLY(arch, name, isakey, priority, kernels)
#define CPUKERN_PACKER(arch, layout, isakey, fn) \
  CPUKERN_ON(arch, Packer{#fn, &layouts::layout, isa::isakey, fn},)

const std::vector<Packer>& packers() {
  static const std::vector<Packer> rows = {
#include "kernels/widely_linear/ukernels/ukernels.inc"
  };
  return rows;
}

std::vector<VariantInfo> list_variants() { return registry().info(); }
#endif

}  // namespace cpukern::widely_linear
