// The vector traits V that lookup_impl.h and signed_impl.h read (G3R8Avx2, G4R16Avx512),
// written once for a layout L (lookup_layout.h) over the one thing an ISA adds: Isa::vec,
// Isa::ivec (float and int32 vectors of L.R lanes, one per row) and
// Isa::permute(table, idx) (lane i = table[idx[i]], float and int32 tables; the instruction
// reads only the low G bits of each index lane, so a pattern is a plain right shift of the
// chunk lane). The rest is lane-wise arithmetic, loads and stores in GCC/Clang vector
// extensions, which compile to the ISA's own instructions (vaddps, vpsrld, vmovaps, ...).
// Internal linkage: inlined into each kernel file, compiled with its ISA's flags.
#pragma once
#include <cstdint>

#include "kernels/common/simd_x86.h"

#include "kernels/widely_linear/ukernels/lookup_impl.h"
#include "kernels/widely_linear/ukernels/lookup_layout.h"
#include "kernels/widely_linear/ukernels/signed_impl.h"

namespace cpukern::widely_linear {
namespace {

template <class Isa, const lookup::Geometry& L, int AccRegs>
struct LookupTraits {
  using vec = typename Isa::vec;
  using ivec = typename Isa::ivec;
  static constexpr int kR = L.R, kG = L.G, kK = L.K, kNegShift = L.neg_shift, kE = 1 << kG;
  static constexpr int kAccRegs = AccRegs;
  static constexpr int kLogR = kR == 8 ? 3 : 4;
  static_assert(1 << kLogR == kR && kE == kR && sizeof(vec) == kR * sizeof(float),
                "one vector holds a tile's rows and a group's whole table");
  typedef float f32 __attribute__((vector_size(sizeof(vec))));
  typedef int32_t i32 __attribute__((vector_size(sizeof(vec))));
  typedef uint32_t u32 __attribute__((vector_size(sizeof(vec))));

  static CPUKERN_WL_INLINE vec zero() { return vec(f32{}); }
  static CPUKERN_WL_INLINE ivec load(const ivec* p) { return *p; }
  static CPUKERN_WL_INLINE vec loadf(const float* p) { return *reinterpret_cast<const vec*>(p); }
  static CPUKERN_WL_INLINE void store(float* p, vec v) { *reinterpret_cast<vec*>(p) = v; }
  static CPUKERN_WL_INLINE void store_i(int32_t* p, ivec v) { *reinterpret_cast<ivec*>(p) = v; }
  template <int n>
  static CPUKERN_WL_INLINE ivec shift(ivec v) {
    return ivec(u32(v) >> n);
  }

  // acc += T[pos] - T[neg] per lane (row).
  static CPUKERN_WL_INLINE vec lookup(vec acc, ivec pos, ivec neg, const float* table) {
    const vec t = loadf(table);
    return vec(f32(acc) + (f32(Isa::permute(t, pos)) - f32(Isa::permute(t, neg))));
  }

  // signed_impl.h: byte offset 64 * (b3(pos) + 2 b3(neg)) of the group at bit `n` per lane.
  struct CodeOffsets {
    alignas(64) int32_t pos[kE] = {};  // 64 b3(m) for every G-bit pattern m
    alignas(64) int32_t neg[kE] = {};  // 128 b3(m)
    constexpr CodeOffsets() {
      constexpr signed_impl::Codes<kG> codes{};
      constexpr int kBytes = signed_impl::kEntry * int(sizeof(float));
      for (int m = 0; m < kE; ++m) {
        pos[m] = kBytes * codes.b3[m];
        neg[m] = 2 * kBytes * codes.b3[m];
      }
    }
  };
  static constexpr CodeOffsets kCodeOffsets{};
  template <int n>
  static CPUKERN_WL_INLINE ivec code_off(ivec w) {
    const ivec pos = Isa::permute(load(reinterpret_cast<const ivec*>(kCodeOffsets.pos)), shift<n>(w));
    const ivec neg =
        Isa::permute(load(reinterpret_cast<const ivec*>(kCodeOffsets.neg)), shift<kNegShift + n>(w));
    return ivec(i32(pos) + i32(neg));
  }

  // d[0..16) = a[0..16) - b[0..16).
  static CPUKERN_WL_INLINE void sub16(float* d, const float* a, const float* b) {
    for (int i = 0; i < 16; i += kR) store(d + i, vec(f32(loadf(a + i)) - f32(loadf(b + i))));
  }
};

#if defined(__AVX2__)
// g3r8x4: 8 rows per ymm, 3-column groups, 8-entry tables (vpermps / vpermd: index bits 0..2).
struct Avx2Permute {
  using vec = __m256;
  using ivec = __m256i;
  static CPUKERN_WL_INLINE vec permute(vec t, ivec i) { return _mm256_permutevar8x32_ps(t, i); }
  static CPUKERN_WL_INLINE ivec permute(ivec t, ivec i) {
    return _mm256_permutevar8x32_epi32(t, i);
  }
};
using G3R8Avx2 = LookupTraits<Avx2Permute, lookup::kG3R8, 8>;
#endif

#if defined(__AVX512F__) || defined(CPUKERN_SIMDE)
// g4r16x4, AVX-512F only (natively or against SIMDe): 16 rows per zmm, 4-column groups,
// 16-entry tables (vpermps / vpermd: index bits 0..3).
struct Avx512Permute {
  using vec = __m512;
  using ivec = __m512i;
  static CPUKERN_WL_INLINE vec permute(vec t, ivec i) { return _mm512_permutexvar_ps(i, t); }
  static CPUKERN_WL_INLINE ivec permute(ivec t, ivec i) { return _mm512_permutexvar_epi32(i, t); }
};
using G4R16Avx512 = LookupTraits<Avx512Permute, lookup::kG4R16, 16>;
#endif

}  // namespace
}  // namespace cpukern::widely_linear
