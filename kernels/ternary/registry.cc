// registry() and packers() (simde_variants() in the :simde library's compile of this file),
// expanded from the kernel list.
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
#define CPUKERN_PACKER(arch, layout, isa_key, packer)

#if defined(CPUKERN_SIMDE)
const std::vector<Variant>& simde_variants() {
  static const std::vector<Variant> rows = {
#include "kernels/ternary/ukernels/ukernels.inc"
  };
  return rows;
}
#else
const Registry<TernaryGemvUkernel>& registry() {
  // "avx2_bmi2" was a row that differed from avx2 only in its packer (now chosen at prepare).
  static const Registry<TernaryGemvUkernel> r("ternary_gemv",
                                              {
#include "kernels/ternary/ukernels/ukernels.inc"
                                              },
                                              {{"avx2_bmi2", "avx2"}});
  return r;
}

#undef CPUKERN_VARIANT
#undef CPUKERN_CATALOGUE_ONLY
#undef CPUKERN_PACKER
#define CPUKERN_VARIANT(arch, row, isa_key, priority, f32, i8)
#define CPUKERN_CATALOGUE_ONLY(arch, row, isa_key, priority, f32, i8)
#define CPUKERN_PACKER(arch, layout, isa_key, packer) \
  CPUKERN_ON(arch, PackerRow{isa::isa_key, #layout, packer}, )

const std::vector<PackerRow>& packers() {
  static const std::vector<PackerRow> rows = {
#include "kernels/ternary/ukernels/ukernels.inc"
  };
  return rows;
}

const Packer& packer_for(const char* layout) {
  const PackerRow* best =
      best_packer(packers(), [&](const PackerRow& p) { return std::strcmp(p.layout, layout) == 0; });
  if (!best) throw std::logic_error(std::string("no packer for layout ") + layout);
  return best->packer;
}

std::vector<VariantInfo> list_variants() { return registry().info(); }
#endif

}  // namespace cpukern::ternary
