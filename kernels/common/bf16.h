// bfloat16 <-> float32, bit-exact with ml_dtypes and torch (round to nearest even, NaN kept quiet).
#pragma once
#include <cstdint>
#include <cstring>

namespace cpukern {

using bf16_t = uint16_t;

inline float bf16_to_f32(bf16_t v) {
  const uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline bf16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return bf16_t((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return bf16_t(bits >> 16);
}

}  // namespace cpukern
