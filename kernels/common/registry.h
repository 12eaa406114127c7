// One registry per op: a table of variants, selection from detected CPU features,
// and override by name (isa= argument or the CPUKERN_ISA environment variable).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/cpu_features.h"
#include "kernels/common/errors.h"

namespace cpukern {

// `Ukernel` is an op-specific struct of tile sizes and function pointers; it must have a
// `const char* name` member holding the micro-kernel's full name
// (e.g. "ternary_gemv_f32_t2p16_8x1__avx2_bmi2").
template <class Ukernel>
struct Variant {
  const char* name;   // short, user-facing: "avx2_bmi2", "neon_bf16_bfmmla", "reference"
  uint64_t required;  // Feature bits the CPU must have
  int priority;       // the highest-priority supported variant is the default
  Ukernel ukernel;

  bool supported() const { return cpu_has(required); }
};

struct VariantInfo {
  std::string name;
  std::string ukernel;
  std::vector<std::string> required;
  int priority = 0;
  bool supported = false;
  bool selected = false;
};

// The name CPUKERN_ISA forces for `op`, or "" when it forces nothing for it.
// CPUKERN_ISA is a comma-separated list of "name" (applies to every op that has a variant
// of that name) or "op=name" (applies to that op only, and must exist there).
std::string isa_override_from_env(const std::string& op, const std::vector<std::string>& names);

template <class Ukernel>
class Registry {
 public:
  Registry(std::string op, std::vector<Variant<Ukernel>> variants)
      : op_(std::move(op)), variants_(std::move(variants)) {}

  const std::string& op() const { return op_; }
  const std::vector<Variant<Ukernel>>& variants() const { return variants_; }

  // Looks a variant up by name; throws ValueError-mapped errors naming `isa` if it is
  // unknown or this CPU cannot run it. Never returns a variant that would SIGILL.
  const Variant<Ukernel>& find(const std::string& isa) const {
    for (const auto& v : variants_) {
      if (isa != v.name) continue;
      if (!v.supported()) {
        std::string need;
        for (const auto& f : feature_names(v.required & ~cpu_info().features))
          need += (need.empty() ? "" : ", ") + f;
        throw_arg("isa", "variant '" + isa + "' of " + op_ + " needs CPU features this CPU lacks (" +
                             need + ")");
      }
      return v;
    }
    throw_arg("isa", "unknown variant '" + isa + "' for " + op_ + "; known: " + joined_names());
  }

  // `isa` empty or null: the default (CPUKERN_ISA if it names a variant of this op, else
  // the best supported one).
  const Variant<Ukernel>& select(const char* isa = nullptr) const {
    if (isa && *isa) return find(isa);
    return default_variant();
  }

  const Variant<Ukernel>& default_variant() const {
    // Chosen once per registry; CPUKERN_ISA is read at first use.
    std::call_once(chosen_once_, [this] { chosen_ = &choose_default(); });
    return *chosen_;
  }

  std::vector<VariantInfo> info() const {
    std::vector<VariantInfo> out;
    const auto* def = &default_variant();
    for (const auto& v : variants_) {
      out.push_back({v.name, v.ukernel.name, feature_names(v.required), v.priority, v.supported(),
                     &v == def});
    }
    return out;
  }

 private:
  const Variant<Ukernel>& choose_default() const {
    std::vector<std::string> names;
    for (const auto& v : variants_) names.push_back(v.name);
    const std::string forced = isa_override_from_env(op_, names);
    if (!forced.empty()) return find(forced);
    const Variant<Ukernel>* best = nullptr;
    for (const auto& v : variants_)
      if (v.supported() && (!best || v.priority > best->priority)) best = &v;
    if (!best) throw_arg("isa", "no variant of " + op_ + " runs on this CPU");
    return *best;
  }

  std::string joined_names() const {
    std::string s;
    for (const auto& v : variants_) s += (s.empty() ? "" : ", ") + std::string(v.name);
    return s;
  }

  std::string op_;
  std::vector<Variant<Ukernel>> variants_;
  mutable std::once_flag chosen_once_;
  mutable const Variant<Ukernel>* chosen_ = nullptr;
};

}  // namespace cpukern
