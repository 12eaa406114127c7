// Naming: ukernels/<isa>_<format>.h (avx512_fma_bf16.h). The AVX-512 fp32-FMA tile on MXFP4
// weights: the bf16 tile of avx512_fma_bf16.h over MXFP4 sources, so that every C element gets
// the bf16 kernel's FMA chain on the exact weights (results equal the bf16 kernel's on the
// dequantized experts bit for bit).
//
// Packing "mxfp4p32x8" (mxfp4.h pack_x8; the avx512_bf16 row's bytes): per 32-k block of a
// 32-column panel the 32 scales, then per 8 k one 32-bit word per column. Decode of 16 weights:
// one shift brings each column's code of k to bits 0-3 of its lane, vpermps looks up the
// code's e2m1 value as fp32 (mxfp4::kValue, code 8 as -0; vpermps reads only index bits 0-3,
// so no mask), and one multiply by the column's 2**(s - 127) gives mxfp4::value(), the
// dequantized weight (exact: two significant bits, subnormals included; inf past fp32's
// range, as dequantize), as in the avx2_fma kernel. No decode GEMV fast path (accumulators
// divided by the block scale, as avx2_fma and avx512_bf16 have) yet: every block takes the
// multiply.
// Prefill (several row blocks): gemm_loop.h's decoded_gemm decodes each (panel, K block) once
// into exact fp32 weights (32 KiB per panel) that the bf16 tile's FMAs read (F32Src), with no
// widening per row block.
#pragma once
#include "kernels/common/simd_x86.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/common/unroll.h"
#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernels/avx512_fma_bf16.h"

namespace cpukern::moe::avx512fma {
namespace {  // internal linkage: compiled per ISA

// 2**(s - 127) of 16 columns' scale bytes s as fp32 (s = 0: the subnormal 2**-127).
inline __m512 scale_factors(const uint8_t* s) {
#if defined(CPUKERN_SIMDE)  // SIMDe 0.7.4 has no vpmovzxbd on zmm (tests only)
  alignas(64) uint32_t bits[16];
  for (int i = 0; i < 16; ++i) bits[i] = mxfp4::scale_bits(s[i]);
  return _mm512_castsi512_ps(_mm512_load_si512(bits));
#else
  const __m512i e = cpukern_slli_epi32(
      _mm512_maskz_cvtepu8_epi32(__mmask16(0xFFFF),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(s))),
      23);
  return _mm512_castsi512_ps(_mm512_max_epi32(e, _mm512_set1_epi32(0x00400000)));
#endif
}

// The e2m1 values of 16 lanes' codes, the code of each lane in bits x8_shift(Q) .. + 3 of x.
template <int Q>
inline __m512 e2m1_values(__m512i x, __m512 values) {
  if constexpr (mxfp4::x8_shift(Q) > 0) x = cpukern_srli_epi32(x, mxfp4::x8_shift(Q));
  return _mm512_permutexvar_ps(x, values);
}

// MXFP4 weights in the mxfp4p32x8 packing, from the first block of the tile's K range; a unit
// is one group of 8 k (one 32-bit word per column).
struct Mxfp4x8Src {
  static constexpr int kKUnit = 8, kUnitsPerBlock = 4, kGroupBytes = 4 * kNR;
  static constexpr int kBlockBytes = mxfp4::x8_block_bytes(kNR);  // 544
  const uint8_t* w;
  const uint8_t* blk = nullptr;
  __m512 f0, f1;  // 2**(s - 127) of columns 0-15, 16-31 of the current block
  const __m512 values = _mm512_load_ps(mxfp4::kValue);
  explicit Mxfp4x8Src(const void* p) : w(static_cast<const uint8_t*>(p)) {}
  void block(int64_t b) {
    blk = w + b * kBlockBytes;
    f0 = scale_factors(blk);
    f1 = scale_factors(blk + 16);
  }
  const char* at(int64_t u) const {
    return reinterpret_cast<const char*>(w + (u / 4) * kBlockBytes + kNR + (u % 4) * kGroupBytes);
  }
  template <int Q>
  void weights(int64_t u, __m512& w0, __m512& w1) const {
    const uint8_t* g = blk + kNR + (u % 4) * kGroupBytes;
    w0 = _mm512_mul_ps(e2m1_values<Q>(_mm512_loadu_si512(g), values), f0);
    w1 = _mm512_mul_ps(e2m1_values<Q>(_mm512_loadu_si512(g + 64), values), f1);
  }
};

// The MXFP4 tile: the bf16 tile over Mxfp4x8Src (the decode in registers) for one row block,
// and for several the bf16 tile over the decoded fp32 weights.
struct Mxfp4Tile : Mxfp4TileOver<Tile<Mxfp4x8Src>, Mxfp4x8Src::kBlockBytes> {
  struct Decoded : Tile<F32Src> {
    using W = float;
  };
  // nk blocks of one panel -> the exact fp32 weights [k][32 columns] (F32Src's order): per 8 k
  // of 32 columns two loads, then per k two shifts (none for the first), two vpermps, two
  // multiplies and two stores.
  static void decode_block(const uint8_t* src, int64_t nk, float* dst) {
    const __m512 values = _mm512_load_ps(mxfp4::kValue);
    for (int64_t b = 0; b < nk; ++b) {
      const uint8_t* blk = src + b * Mxfp4x8Src::kBlockBytes;
      const __m512 f0 = scale_factors(blk), f1 = scale_factors(blk + 16);
      for (int g = 0; g < 4; ++g) {
        const uint8_t* p = blk + kNR + g * Mxfp4x8Src::kGroupBytes;
        const __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
        float* d = dst + (b * mxfp4::kBlock + 8 * g) * kNR;
        each_k(
            [&](auto q) {
              constexpr int Q = decltype(q)::value;
              _mm512_store_ps(d + Q * kNR, _mm512_mul_ps(e2m1_values<Q>(x0, values), f0));
              _mm512_store_ps(d + Q * kNR + 16, _mm512_mul_ps(e2m1_values<Q>(x1, values), f1));
            },
            std::make_integer_sequence<int, 8>());
      }
    }
  }
  static constexpr auto pack_mxfp4 = mxfp4::pack_x8<kNR>;
};

}  // namespace
}  // namespace cpukern::moe::avx512fma
