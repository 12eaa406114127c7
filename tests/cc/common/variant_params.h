// Shared by every op's table-driven test: the rows under test are the op's kernel list's lines,
// generated from the list apart from the registry (tests/cc/<op>/list_rows.h): every shipped
// and catalogue-only line, or the simde lines in the SIMDe build of the test. A row this CPU
// cannot run is skipped with the features it lacks.
//
//   INSTANTIATE_TEST_SUITE_P(All, MyTest, ::testing::ValuesIn(test_variant_names(
//                                list_rows(), simde_variants())));
//   const Variant* v = find_test_variant(list_rows(), simde_variants(), GetParam());
//   CPUKERN_SKIP_IF_UNSUPPORTED(*v);
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/common/registry.h"

namespace cpukern::testing {

// CPUKERN_TEST_SIMDE (the SIMDe build of a test): the simde lines; else the list's others.
template <class Ukernel>
std::vector<std::string> test_variant_names(const std::vector<Variant<Ukernel>>& list,
                                            const std::vector<Variant<Ukernel>>& simde) {
  std::vector<std::string> names;
#if defined(CPUKERN_TEST_SIMDE)
  for (const auto& v : simde) names.push_back(v.name);
#else
  for (const auto& v : list) names.push_back(v.name);
#endif
  return names;
}

template <class Ukernel>
const Variant<Ukernel>* find_test_variant(const std::vector<Variant<Ukernel>>& list,
                                          const std::vector<Variant<Ukernel>>& simde,
                                          const std::string& name) {
  for (const auto* rows : {&simde, &list})
    for (const auto& v : *rows)
      if (name == v.name) return &v;
  return nullptr;
}

// Why variant `v` cannot run here ("" when it can).
template <class Ukernel>
std::string unsupported_reason(const Variant<Ukernel>& v) {
  if (v.supported()) return "";
  return std::string("variant ") + v.name + " needs CPU features this CPU lacks: " +
         why_missing(v.required & ~cpu_info().features);
}

}  // namespace cpukern::testing

// In a test body or SetUp: skips (printing why) when this CPU cannot run the variant.
#define CPUKERN_SKIP_IF_UNSUPPORTED(v)                                                  \
  do {                                                                                  \
    const std::string cpukern_why_ = ::cpukern::testing::unsupported_reason(v);         \
    if (!cpukern_why_.empty()) GTEST_SKIP() << cpukern_why_;                            \
  } while (0)
