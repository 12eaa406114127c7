// The registry (shipped rows and catalogue) and packers of the ternary GEMV, from the kernel
// list (kernels/common/op_registry.inc), and packer_for().
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ternary/kernel_rows.h"

namespace cpukern::ternary {

#define CPUKERN_KERNEL_LIST "kernels/ternary/ukernels/ukernels.inc"
#define CPUKERN_LIST_ROW CPUKERN_TERNARY_ROW
#define CPUKERN_OP_NAME "ternary_gemv"
#define CPUKERN_UKERNEL_TYPE TernaryGemvUkernel
#define CPUKERN_PACKER_TYPE PackerRow
#define CPUKERN_PACKER_ROW(layout, isa_key, packer) PackerRow{isa::isa_key, #layout, packer}
#include "kernels/common/op_registry.inc"

std::vector<VariantInfo> list_variants() { return registry().info(); }

const Packer& packer_for(const char* layout) {
  const PackerRow* best =
      best_packer(packers(), [&](const PackerRow& p) { return std::strcmp(p.layout, layout) == 0; });
  if (!best) throw std::logic_error(std::string("no packer for layout ") + layout);
  return best->packer;
}

}  // namespace cpukern::ternary
