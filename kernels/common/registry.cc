#include "kernels/common/registry.h"

#include <algorithm>
#include <sstream>

namespace cpukern {

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::optional<std::string> variant_override_from_env(const std::string& op,
                                                 const std::vector<std::string>& names) {
  const char* env = std::getenv("CPUKERN_VARIANT");
  if (!env || !*env) return std::nullopt;
  std::stringstream ss(env);
  std::string entry;
  std::optional<std::string> plain;
  while (std::getline(ss, entry, ',')) {
    const auto eq = entry.find('=');
    if (eq != std::string::npos) {
      if (entry.substr(0, eq) == op) return entry.substr(eq + 1);
    } else if (!plain && std::find(names.begin(), names.end(), entry) != names.end()) {
      plain = entry;
    }
  }
  return plain;
}

}  // namespace cpukern
