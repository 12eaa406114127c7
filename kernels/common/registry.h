// One registry per op: its rows come from the op's kernel list
// (kernels/<op>/ukernels/ukernels.inc), selection from detected CPU features, and override
// by name (isa= argument or the CPUKERN_ISA environment variable).
//
// The rows are the op's micro-kernel catalogue. Shipped rows (CPUKERN_VARIANT lines) are the
// variants: listed by cpukern.kernels() and chosen by default. Catalogue-only rows
// (CPUKERN_CATALOGUE_ONLY lines: kernels that win on no CPU we know of, kept for a paper's
// comparison, a memory/speed trade or an unmeasured core) are tested and benchmarked like
// the others and can be forced by name, but are never listed or chosen by default.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/cpu_features.h"
#include "kernels/common/errors.h"
#include "kernels/common/isa.h"

namespace cpukern {

// `Ukernel` is an op-specific struct of tile sizes and function pointers; it must have a
// `const char* name` member holding the micro-kernel's full name
// (e.g. "ternary_gemv_f32_lut3r8_8x1__avx2").
template <class Ukernel>
struct Variant {
  const char* name;   // short, user-facing: "avx2", "neon_bf16_bfmmla", "reference"
  uint64_t required;  // Feature bits the CPU must have (an isa:: set)
  int priority;       // the highest-priority supported variant is the default
  Ukernel ukernel;
  bool shipped = true;  // false: catalogue only (forced by name; never listed or default)

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

// The name CPUKERN_ISA forces for `op`, or "" when it forces nothing for it.
// CPUKERN_ISA is a comma-separated list of "name" (applies to every op that has a variant
// of that name) or "op=name" (applies to that op only, and must exist there).
std::string isa_override_from_env(const std::string& op, const std::vector<std::string>& names);

template <class Ukernel>
class Registry {
 public:
  using Row = Variant<Ukernel>;

  Registry(std::string op, std::vector<Row> variants, std::vector<VariantAlias> aliases = {})
      : op_(std::move(op)), variants_(std::move(variants)), aliases_(std::move(aliases)) {}

  const std::string& op() const { return op_; }
  // Every row of the catalogue, shipped or not: what tests and benchmarks iterate.
  const std::vector<Row>& variants() const { return variants_; }

  // Looks a variant up by name (or alias); throws ValueError-mapped errors naming `isa` if
  // it is unknown or this CPU cannot run it. Never returns a variant that would SIGILL.
  const Row& find(const std::string& isa) const {
    std::string name = isa;
    for (const auto& a : aliases_)
      if (name == a.alias) name = a.name;
    for (const auto& v : variants_) {
      if (name != v.name) continue;
      if (!v.supported())
        throw_arg("isa", "variant '" + isa + "' of " + op_ +
                             " needs CPU features this CPU lacks (" + joined(missing_features(v)) +
                             ")");
      return v;
    }
    throw_arg("isa", "unknown variant '" + isa + "' for " + op_ + "; known: " + joined(names()));
  }

  // `isa` empty or null: the default (CPUKERN_ISA if it names a variant of this op, else
  // the best supported one).
  const Row& select(const char* isa = nullptr) const {
    if (isa && *isa) return find(isa);
    return default_variant();
  }
  // Compares the whole string: "avx2\0junk" is not "avx2".
  const Row& select(const std::string& isa) const {
    return isa.empty() ? default_variant() : find(isa);
  }

  const Row& default_variant() const {
    // Chosen once per registry; CPUKERN_ISA is read at first use.
    std::call_once(chosen_once_, [this] { chosen_ = &choose_default(); });
    return *chosen_;
  }

  // Every shipped row; `selected` marks the default. A CPUKERN_ISA entry that forces a name this op
  // cannot use leaves none selected here (listing never throws); the op's calls report it.
  std::vector<VariantInfo> info() const {
    std::vector<VariantInfo> out;
    const Row* def = nullptr;
    try {
      def = &default_variant();
    } catch (const InvalidArgument&) {
    }
    for (const auto& v : variants_) {
      if (!v.shipped) continue;
      out.push_back({v.name, v.ukernel.name, feature_names(v.required), missing_features(v),
                     why_missing(v.required & ~cpu_info().features), v.priority, v.supported(),
                     &v == def});
    }
    return out;
  }

  // Every name find() accepts: the rows', then the aliases.
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& v : variants_) n.push_back(v.name);
    for (const auto& a : aliases_) n.push_back(a.alias);
    return n;
  }

 private:
  const Row& choose_default() const {
    const std::string forced = isa_override_from_env(op_, names());
    if (!forced.empty()) return find(forced);
    const Row* best = nullptr;
    for (const auto& v : variants_)
      if (v.shipped && v.supported() && (!best || v.priority > best->priority)) best = &v;
    if (!best) throw_arg("isa", "no variant of " + op_ + " runs on this CPU");
    return *best;
  }

  std::string op_;
  std::vector<Row> variants_;
  std::vector<VariantAlias> aliases_;
  mutable std::once_flag chosen_once_;
  mutable const Row* chosen_ = nullptr;
};

}  // namespace cpukern
