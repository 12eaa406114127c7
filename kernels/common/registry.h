// One registry per op, generated from the op's kernel list (kernels/<op>/ukernels/ukernels.inc):
// selection from detected CPU features, and override by name (variant= argument or the
// CPUKERN_VARIANT environment variable).
//
// The registry's rows are the shipped variants (CPUKERN_VARIANT lines): what dispatch picks
// from and what cpukern.kernels() lists. The catalogue-only rows (CPUKERN_CATALOGUE_ONLY lines:
// kernels that win on no CPU we know of, kept for a paper's comparison, a memory/speed trade
// or an unmeasured core) are a separate table generated from the same list: forcing by name
// resolves through it, nothing else does. The tests run every line of the list (shipped,
// catalogue-only and SIMDe) from their own expansion of it (tests/cc/<op>/).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/cpu_features.h"
#include "kernels/common/errors.h"
#include "kernels/common/isa.h"

namespace cpukern {

// `Ukernel` is an op-specific struct of tile sizes and function pointers; it must have a
// `const char* name` member holding the micro-kernel's full name
// (e.g. "ternary_gemv_f32_f32_lut3r8_8x1__avx2").
template <class Ukernel>
struct Variant {
  const char* name;   // short, user-facing: "avx2", "neon_bf16_bfmmla", "reference"
  uint64_t required;  // Feature bits the CPU must have (an isa:: set)
  int priority;       // the highest-priority supported variant is the default
  Ukernel ukernel;

  bool supported() const { return cpu_has(required); }
};

// Names of the features in `required` that this CPU lacks ("avx512f", "bf16", ...).
inline std::vector<std::string> missing_features(uint64_t required) {
  return feature_names(required & ~cpu_info().features);
}
template <class Ukernel>
std::vector<std::string> missing_features(const Variant<Ukernel>& v) {
  return missing_features(v.required);
}
// "avx512f, avx512bw" (for messages and skip reasons).
std::string joined(const std::vector<std::string>& names);

// Packers (the CPUKERN_PACKER lines of a kernel list): of the rows `matches` accepts (one
// layout's packers; all of them write the same bytes), the supported one that needs the most
// CPU features, i.e. the fastest. Rows have `required` and `supported()`. Null if none.
template <class Row, class Match>
const Row* best_packer(const std::vector<Row>& rows, Match matches) {
  const Row* best = nullptr;
  for (const Row& r : rows)
    if (matches(r) && r.supported() &&
        (!best || __builtin_popcountll(r.required) > __builtin_popcountll(best->required)))
      best = &r;
  return best;
}

struct VariantInfo {
  std::string name;
  std::string ukernel;
  std::vector<std::string> required;
  std::vector<std::string> missing;  // required features this CPU lacks
  std::string why;                   // why they are missing ("" when none is)
  int priority = 0;
  bool supported = false;
  bool selected = false;
  // fused_moe: calls with more (token, expert) rows per expert than this run AMX tiles
  // (0: the row has none).
  int tiles_min_rows = 0;
};

// An old variant name that still selects a row (forced names in users' code keep working).
struct VariantAlias {
  const char* alias;
  const char* name;
};

// The name CPUKERN_VARIANT forces for `op`, or nullopt when it forces nothing for it.
// CPUKERN_VARIANT is a comma-separated list of "name" (applies to every op that has a variant
// of that name) or "op=name" (applies to that op only, and must exist there: "op=" forces
// the empty name, which find() refuses, rather than being ignored).
std::optional<std::string> variant_override_from_env(const std::string& op,
                                                 const std::vector<std::string>& names);

template <class Ukernel>
class Registry {
 public:
  using Row = Variant<Ukernel>;

  // variants: the shipped rows; catalogue: the catalogue-only rows (forced by name only).
  Registry(std::string op, std::vector<Row> variants, std::vector<Row> catalogue = {},
           std::vector<VariantAlias> aliases = {})
      : op_(std::move(op)),
        variants_(std::move(variants)),
        catalogue_(std::move(catalogue)),
        aliases_(std::move(aliases)) {}

  const std::string& op() const { return op_; }
  // The shipped variants: what dispatch picks from and list_variants() reports.
  const std::vector<Row>& variants() const { return variants_; }
  // The catalogue-only rows: reached by name (find, named), never by default.
  const std::vector<Row>& catalogue() const { return catalogue_; }

  // The shipped rows, then the catalogue's: every row a name can force (benchmarks' tables).
  std::vector<std::reference_wrapper<const Row>> all_rows() const {
    std::vector<std::reference_wrapper<const Row>> rows(variants_.begin(), variants_.end());
    rows.insert(rows.end(), catalogue_.begin(), catalogue_.end());
    return rows;
  }

  // The row called `name` (or an alias of it), shipped or catalogue-only, whether or not this
  // CPU runs it; null if none is (an import looks the maker of a buffer up with this).
  const Row* named(const std::string& name) const {
    std::string n = name;
    for (const auto& a : aliases_)
      if (n == a.alias) n = a.name;
    for (const auto* rows : {&variants_, &catalogue_})
      for (const auto& v : *rows)
        if (n == v.name) return &v;
    return nullptr;
  }

  // Looks a variant up by name (or alias); throws ValueError-mapped errors naming `variant` if
  // it is unknown or this CPU cannot run it. Never returns a variant that would SIGILL.
  const Row& find(const std::string& variant) const {
    const Row* v = named(variant);
    if (!v)
      throw_arg("variant",
                "unknown variant '" + variant + "' for " + op_ + "; known: " + joined(names()));
    if (!v->supported())
      throw_arg("variant", "variant '" + variant + "' of " + op_ +
                               " needs CPU features this CPU lacks (" +
                               joined(missing_features(*v)) + ")");
    return *v;
  }

  // `variant` empty or null: the default (CPUKERN_VARIANT if it names a variant of this op, else
  // the best supported one).
  const Row& select(const char* variant = nullptr) const {
    if (variant && *variant) return find(variant);
    return default_variant();
  }
  // Compares the whole string: "avx2\0junk" is not "avx2".
  const Row& select(const std::string& variant) const {
    return variant.empty() ? default_variant() : find(variant);
  }

  const Row& default_variant() const {
    // Chosen once per registry; CPUKERN_VARIANT is read at first use.
    std::call_once(chosen_once_, [this] { chosen_ = &choose_default(); });
    return *chosen_;
  }

  // Every shipped row; `selected` marks the default. A CPUKERN_VARIANT entry that forces a name
  // this op cannot use leaves none selected here (listing never throws); the op's calls report it.
  std::vector<VariantInfo> info() const {
    std::vector<VariantInfo> out;
    const Row* def = nullptr;
    try {
      def = &default_variant();
    } catch (const InvalidArgument&) {
    }
    for (const auto& v : variants_) {
      out.push_back({v.name, v.ukernel.name, feature_names(v.required), missing_features(v),
                     why_missing(v.required & ~cpu_info().features), v.priority, v.supported(),
                     &v == def});
    }
    return out;
  }

  // Every name find() accepts: the shipped rows', the catalogue's, then the aliases.
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& v : variants_) n.push_back(v.name);
    for (const auto& v : catalogue_) n.push_back(v.name);
    for (const auto& a : aliases_) n.push_back(a.alias);
    return n;
  }

 private:
  const Row& choose_default() const {
    const auto forced = variant_override_from_env(op_, names());
    if (forced) return find(*forced);
    const Row* best = nullptr;
    for (const auto& v : variants_)
      if (v.supported() && (!best || v.priority > best->priority)) best = &v;
    if (!best) throw_arg("variant", "no variant of " + op_ + " runs on this CPU");
    return *best;
  }

  std::string op_;
  std::vector<Row> variants_;
  std::vector<Row> catalogue_;
  std::vector<VariantAlias> aliases_;
  mutable std::once_flag chosen_once_;
  mutable const Row* chosen_ = nullptr;
};

}  // namespace cpukern
