// The weight sources of a register tile's panels, shared by the tile headers that take their
// weights through a source object per panel (<isa>_<format>.h: avx2_fma_*, avx512_bf16_*,
// neon_fma_*).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace cpukern::moe {
namespace {  // internal linkage: compiled per ISA

// The weight sources of panels w, w + panel, ... (one Src per index of J).
template <class Src, class WT, size_t... J>
inline std::array<Src, sizeof...(J)> sources(const WT* w, int64_t panel,
                                             std::index_sequence<J...>) {
  return {Src(w + int64_t(J) * panel)...};
}

}  // namespace
}  // namespace cpukern::moe
