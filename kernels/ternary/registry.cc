// The registry rows, packers and SIMDe rows of the ternary GEMV, from the kernel list
// (kernels/common/op_registry.inc), and packer_for().
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/isa.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {

#define CPUKERN_VARIANT(arch, row, isa_key, priority, f32, i8) \
  CPUKERN_ON(arch, Variant{#row, isa::isa_key, priority, {f32.name, f32, i8}}, )
#define CPUKERN_CATALOGUE_ONLY(arch, row, isa_key, priority, f32, i8) \
  CPUKERN_ON(arch, Variant{#row, isa::isa_key, priority, {f32.name, f32, i8}, false}, )

#define CPUKERN_KERNEL_LIST "kernels/ternary/ukernels/ukernels.inc"
#define CPUKERN_OP_NAME "ternary_gemv"
#define CPUKERN_UKERNEL_TYPE TernaryGemvUkernel
#define CPUKERN_PACKER_TYPE PackerRow
#define CPUKERN_PACKER_ROW(layout, isa_key, packer) PackerRow{isa::isa_key, #layout, packer}
#include "kernels/common/op_registry.inc"

#if !defined(CPUKERN_SIMDE)
const Packer& packer_for(const char* layout) {
  const PackerRow* best =
      best_packer(packers(), [&](const PackerRow& p) { return std::strcmp(p.layout, layout) == 0; });
  if (!best) throw std::logic_error(std::string("no packer for layout ") + layout);
  return best->packer;
}
#endif

}  // namespace cpukern::ternary
