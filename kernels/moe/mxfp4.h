// MXFP4 (OCP Microscaling, as gpt-oss ships its experts): blocks of 32 weights along K, each
// 16 bytes of e2m1 codes (two per byte, the low nibble = the even index) and one e8m0 scale
// byte s (2**(s - 127); s = 255 is NaN in OCP MX and is refused by cpukern). e2m1 codes:
// bit 3 = sign, bits 0..2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
//
// Every e2m1 value times 2**(s - 127) is exact in fp32 and in bf16 where it is finite (it has
// two significant bits and its exponent lies in [-128, 129]; bf16 and fp32 share fp32's
// exponent range, subnormals included), and rounds to +-inf where it is not (6 * 2**127):
// so value() below equals bf16_to_f32(dequantized bf16) bit for bit. The micro-kernels decode
// in registers as float(2e) * 2**(s - 128) (one exact multiply) or as fp16(e) * 2**(s - 127);
// exact with the FPU's default subnormal handling (no flush-to-zero / denormals-are-zero):
// the smallest values and the s = 0 factor are subnormal.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/bf16.h"

namespace cpukern::moe::mxfp4 {

inline constexpr int kBlock = 32;      // weights per block
inline constexpr int kBlockBytes = 16; // e2m1 bytes per block
inline constexpr uint8_t kNaNScale = 255;

// 2 * e2m1 value of each code, as int8 (exact small integers).
inline constexpr int8_t kTwice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// Each code's e2m1 value as fp32 (code 8: -0), for 16-entry float lookups (vpermps).
alignas(64) inline constexpr float kValue[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                                 4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                                 -2.0f, -3.0f, -4.0f, -6.0f};
// The high byte of the fp16 encoding of each code's value (the low byte is zero).
inline constexpr uint8_t kF16Hi[16] = {0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46,
                                       0x80, 0xB8, 0xBC, 0xBE, 0xC0, 0xC2, 0xC4, 0xC6};

// The low and high bytes of the bf16 encoding of each code's value, code 8 as -0 (the
// x86 decodes and the BFMMLA fast path: every decode gives exactly value(), the sign of a
// zero weight included, which decides the sign of a zero sum).
inline constexpr uint8_t kBf16Lo[16] = {0, 0, 0x80, 0xC0, 0, 0x40, 0x80, 0xC0,
                                        0, 0, 0x80, 0xC0, 0, 0x40, 0x80, 0xC0};
inline constexpr uint8_t kBf16Hi[16] = {0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40,
                                        0x80, 0xBF, 0xBF, 0xBF, 0xC0, 0xC0, 0xC0, 0xC0};

// The e8m0 bias: scale byte s means 2**(s - kScaleBias); s = kScaleBias is 1.
inline constexpr int kScaleBias = 127;

// The fast-path window of the MXFP4 decode GEMV (avx2_fma_mxfp4.h, avx512_bf16_mxfp4.h,
// neon_bfmmla_mxfp4.h). There each accumulator holds C / S, S = 2**(s - 127) its column's
// block scale, so the weights enter as the unscaled e2m1 values e, and one multiply per
// accumulator per 32-k block moves from one block's domain to the next (by 2**(s_prev - s)).
// Scaling by a power of two commutes with every rounding as long as, in both domains, no
// value needs bits below fp32's smallest step (or, where the instruction flushes subnormals:
// vdpbf16ps, BFMMLA, no nonzero value is subnormal) and no sum overflows. The window admits
// exactly such inputs, so the fast path's results equal the exact decode's bit for bit; any
// other block or row runs the exact per-weight decode (the same bits, only slower):
//  - block scales s in [kFastScaleMin, kFastScaleMax]: S within 2**+-32;
//  - activations 0 or 2**kFastActMinExp <= |a| <= 2**kFastActMaxExp (bf16 a: 8 significant
//    bits, e: lsb 2**-1): every product a e S is a multiple of 2**(kFastActMinExp - 40) and
//    stays so divided by S: 2**-104 and 2**-136 for the fp32 FMA tiles (subnormals exact,
//    above 2**-149), 2**-80 and 2**-112 for the flushing ones (kFastActMinExpFtz: above
//    fp32's smallest normal 2**-126), so every product is exact in both domains;
//  - K < kFastMaxK: |a e S| <= 6 * 2**64 and 1/S <= 2**32, so every sum stays below
//    1.5 * 2**126 in both domains (no overflow).
inline constexpr int kFastScaleMin = kScaleBias - 32;  // 95
inline constexpr int kFastScaleMax = kScaleBias + 32;  // 159
inline constexpr int kFastScaleSpan = kFastScaleMax - kFastScaleMin;  // 64
inline constexpr int kFastActMaxExp = 32;
inline constexpr int kFastActMinExp = -64;     // fp32 FMA tiles (AVX2): subnormals kept
inline constexpr int kFastActMinExpFtz = -40;  // vdpbf16ps / BFMMLA tiles: subnormals flushed
inline constexpr int64_t kFastMaxK = int64_t(1) << 28;
// The bits of |a| at the activation bounds (for integer compares of |a|'s bits), as fp32
// (AVX2: rows pre-widened) and as bf16 (the bf16-operand tiles).
inline constexpr int kFastActLoF32 = (127 + kFastActMinExp) << 23;      // 2**-64
inline constexpr int kFastActHiF32 = (127 + kFastActMaxExp) << 23;      // 2**32
inline constexpr int kFastActLoBf16 = (127 + kFastActMinExpFtz) << 7;   // 2**-40
inline constexpr int kFastActHiBf16 = (127 + kFastActMaxExp) << 7;      // 2**32
// The exponent byte 127 + s_from - s_to of a step between two fast blocks' domains (or C's,
// s = 127): in [63, 191], so byte arithmetic never wraps and the factor is a normal fp32.
inline constexpr int kFastStepMin = kScaleBias + kFastScaleMin - kFastScaleMax;  // 63
inline constexpr int kFastStepMax = kScaleBias + kFastScaleMax - kFastScaleMin;  // 191
static_assert(kFastStepMin > 0 && kFastStepMax < 255, "step factors stay normal, bytes never wrap");
// A block scale inside the window (the SIMD checks compute the same: s - min <= span, unsigned).
inline bool fast_scale_ok(uint8_t s) { return uint8_t(s - kFastScaleMin) <= kFastScaleSpan; }

// Bits of the fp32 2**(s - 127) (s = 0: the subnormal 2**-127).
inline uint32_t scale_bits(uint8_t s) { return s ? uint32_t(s) << 23 : 0x00400000u; }
inline float scale_f32(uint8_t s) {
  const uint32_t b = scale_bits(s);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The exact value of code c (0..15) under scale s (0..254), as fp32 (inf where it overflows).
// Code 8 is -0, in every decode too: a zero weight's product keeps its sign, and a sum can be
// -0 (a flushed underflow on BF16 dot products, or C = -0 when accumulating), so +0 for it
// would change the sign of such a zero result.
inline float value(uint8_t code, uint8_t s) { return kValue[code & 15] * scale_f32(s); }
// The code at index j (0..31) of a 16-byte block.
inline uint8_t code_at(const uint8_t* block, int j) {
  return (block[j >> 1] >> ((j & 1) * 4)) & 15;
}

// Dequantize rows of k weights (k % 32 == 0): blocks (rows, k/32, 16), scales (rows, k/32)
// -> out (rows, k) bf16. Scales must not be 255 (check with first_nan_scale).
inline void dequantize(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t k,
                       bf16_t* out) {
  const int64_t nb = k / kBlock;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = blocks + (r * nb + b) * kBlockBytes;
      const uint8_t s = scales[r * nb + b];
      for (int j = 0; j < kBlock; ++j)
        out[r * k + b * kBlock + j] = f32_to_bf16(value(code_at(blk, j), s));
    }
}

// Index of the first scale byte equal to 255, or -1.
// Packs gpt-oss's blocks into NR-column panels: per (panel, 32-k block) `step` bytes, the NR
// scale bytes first, then code byte j (of 16) of column col at NR + byte_at(col, j), which is
// the tile's own operand order. Columns past o get zero codes (and scale 0). The same for
// every tile, so only byte_at differs.
template <int NR, class ByteAt>
void pack_panels(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t k, int64_t step,
                 void* dst, ByteAt byte_at) {
  const int64_t nb = k / kBlock, panels = (o + NR - 1) / NR;
  uint8_t* d = static_cast<uint8_t*>(dst);
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = d + (p * nb + b) * step;
      for (int col = 0; col < NR; ++col) {
        const int64_t n = p * NR + col;
        out[col] = n < o ? scales[n * nb + b] : 0;
        for (int j = 0; j < kBlockBytes; ++j)
          out[NR + byte_at(col, j)] = n < o ? blocks[(n * nb + b) * kBlockBytes + j] : 0;
      }
    }
}

inline int64_t first_nan_scale(const uint8_t* scales, int64_t n) {
  const void* p = std::memchr(scales, kNaNScale, size_t(n));
  return p ? static_cast<const uint8_t*>(p) - scales : -1;
}

// The "mxfp4p32x8" packing (NR = 32), read by the avx512_bf16 row's MXFP4 tile
// (avx512_bf16_mxfp4.h) and the avx512 rows' (avx512_fma_mxfp4.h): per (panel, 32-k block) the
// NR scales, then per group g of 8 k one 32-bit word per column, whose nibble t (bits 4t..4t+3)
// holds the code of k = 8g + 2t for t < 4 and of k = 8g + 2(t - 4) + 1 for t >= 4 (a k pair's
// two codes in the word's two 16-bit halves: the vdpbf16ps pair order). Shifting the word
// right by x8_shift(q) brings the code of k = 8g + q to bits 0-3. Internal linkage: compiled
// per ISA.
namespace {
constexpr int x8_shift(int q) { return q % 2 ? 16 + 4 * (q / 2) : 4 * (q / 2); }
constexpr int x8_block_bytes(int nr) { return nr + kBlockBytes * nr; }

template <int NR>
void pack_x8(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t k, void* dst) {
  const int64_t nb = k / kBlock, panels = (o + NR - 1) / NR;
  uint8_t* d = static_cast<uint8_t*>(dst);
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = d + (p * nb + b) * x8_block_bytes(NR);
      for (int col = 0; col < NR; ++col) {
        const int64_t n = p * NR + col;  // columns past o: scale 0, codes 0
        out[col] = n < o ? scales[n * nb + b] : 0;
        for (int g = 0; g < 4; ++g) {
          uint32_t word = 0;
          if (n < o)
            for (int q = 0; q < 8; ++q)
              word |= uint32_t(code_at(blocks + (n * nb + b) * kBlockBytes, 8 * g + q))
                      << x8_shift(q);
          std::memcpy(out + NR + (g * NR + col) * 4, &word, 4);
        }
      }
    }
}
}  // namespace

// The nearest e2m1 code of v (|v| <= 6 after scaling; ties to the even mantissa, as OCP MX).
inline uint8_t nearest_code(float v) {
  const uint8_t sign = std::signbit(v) ? 8 : 0;
  const float a = std::fabs(v);
  // Midpoints between 0, .5, 1, 1.5, 2, 3, 4, 6; at a tie the code with an even mantissa bit.
  static constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t c = 0;
  while (c < 7 && (a > kMid[c] || (a == kMid[c] && (c & 1)))) ++c;
  return sign | c;
}

// Quantize rows of k bf16 weights (k % 32 == 0) to MXFP4, OCP MX style: per block the scale
// 2**(floor(log2(amax)) - 2) (the largest e2m1 exponent), values rounded to nearest (even),
// clamped to +-6. Non-finite inputs: a block with an inf or NaN raises its scale to 254 and
// saturates (NaN -> 0); all-zero blocks get scale 0.
inline void quantize(const bf16_t* w, int64_t rows, int64_t k, uint8_t* blocks,
                     uint8_t* scales) {
  const int64_t nb = k / kBlock;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const bf16_t* src = w + r * k + b * kBlock;
      float amax = 0.0f;
      for (int j = 0; j < kBlock; ++j) {
        const float v = std::fabs(bf16_to_f32(src[j]));
        if (!(v <= amax)) amax = std::isnan(v) ? amax : v;
      }
      int s = 0;
      if (std::isinf(amax)) {
        s = 254;
      } else if (amax > 0.0f) {
        s = std::ilogb(amax) - 2 + 127;
        s = s < 0 ? 0 : s > 254 ? 254 : s;
      }
      scales[r * nb + b] = uint8_t(s);
      const float inv = std::ldexp(1.0f, 127 - s);  // finite for s >= 1; s = 0: 2**127
      uint8_t* blk = blocks + (r * nb + b) * kBlockBytes;
      for (int j = 0; j < kBlockBytes; ++j) {
        uint8_t c[2];
        for (int h = 0; h < 2; ++h) {
          float v = bf16_to_f32(src[2 * j + h]);
          if (std::isnan(v)) v = 0.0f;
          // v * 2**(127 - s) without overflowing for s = 0 (scale in two steps).
          const float q = s == 0 ? (v * 0x1p64f) * 0x1p63f : v * inv;
          c[h] = nearest_code(std::fmax(-6.0f, std::fmin(6.0f, q)));
          if (std::isinf(q)) c[h] = q > 0 ? 7 : 15;
        }
        blk[j] = uint8_t(c[0] | c[1] << 4);
      }
    }
}

}  // namespace cpukern::moe::mxfp4
