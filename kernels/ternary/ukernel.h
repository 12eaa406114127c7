// Ternary GEMV micro-kernel interface (internal). One registry row = one fp32 micro-kernel
// plus one int8 micro-kernel for the same ISA. Micro-kernels are stateless: they convert
// the public packed weights into their own layout once (pack), and compute raw sums over a
// range of rows for a batch of activations (run). The driver (gemv.cc) does validation,
// row tiling over the thread pool, int8 quantisation and the scale epilogue.
//
// Naming grammar: <op>_<out>_<lhs-layout>_<MR>x<NR>__<isa>, where op = ternary_gemv,
// out = f32 | i8 (activation/accumulation mode), lhs-layout = the weight layout word (the
// packer lives with its kernel and uses the same word), MR = rows per tile, NR = 1 (GEMV).
// Activations are dense row-major, so the rhs-layout word is omitted. Layout words:
//   t2p16     public format: 16 weights per uint32, 2 bits each, rows in order
//   t2p16r16  public words interleaved across 16-row tiles (word w of rows 0..15 adjacent)
//   lut3r8    8-row tiles; per 30 columns one 8x uint32 "add" pattern vector and one
//             "subtract" pattern vector, 3 bits per group of 3 columns (10 groups per lane)
//   q2b128    per row, per 128 columns 32 bytes; byte i holds (w+1) of columns i, i+32,
//             i+64, i+96 in bits 0-1, 2-3, 4-5, 6-7
//   q2b256    the same with 256 columns per 64 bytes
//
// Rules every micro-kernel follows:
//  - The tile grid starts at row 0; the driver passes ranges that start on a tile boundary.
//    A row's result never depends on which range or which other rows are computed with it,
//    so results are identical for any thread count.
//  - fp32-mode run/xprep functions contain no multiply instruction (checked by
//    tests/static/check_no_multiply.py): all offsets they need are passed in precomputed.
#pragma once
#include <cstdint>

#include "kernels/common/registry.h"
#include "kernels/ternary/ternary.h"

namespace cpukern::ternary {

// ---- fp32 mode ----------------------------------------------------------------------------
// Precomputed geometry (computed by the ukernel's `geometry` function, outside run).
struct F32Geometry {
  int64_t tile_bytes = 0;  // bytes of packed weights per tile of `mr` rows
  int64_t x_bytes = 0;     // bytes of prepared activations per batch row (multiple of 64)
  int64_t p0 = 0, p1 = 0;  // kernel-specific (block counts etc.)
};

struct F32Args {
  const void* w;       // packed weights of the first tile of the range
  int64_t rows;        // rows to compute: a multiple of mr, or the remaining rows up to m
  const void* xp;      // prepared activations, batch rows of geo->x_bytes
  int64_t batch;
  float* y;            // y[b * ldy + r] for r < rows (already offset to the first row)
  int64_t ldy;
  const F32Geometry* geo;
};

struct F32Ukernel {
  const char* name;
  int mr;  // rows per tile
  F32Geometry (*geometry)(int64_t m, int64_t k);
  // Bytes of the packed layout for (m, k); pack writes it into zeroed memory.
  int64_t (*packed_size)(int64_t m, int64_t k);
  void (*pack)(const uint32_t* packed, int64_t m, int64_t k, void* dst);
  // Converts one row of activations (k floats) into the kernel's form (geo.x_bytes).
  void (*xprep)(const float* x, const F32Geometry* geo, void* dst);
  // y[b, r] = sum_j w[r, j] x[b, j] (raw sums, no scale).
  void (*run)(const F32Args* args);
};

// ---- int8 mode ----------------------------------------------------------------------------
// Quantised activations, built by the driver and shared by every int8 micro-kernel:
// q[b * stride + j] = round(x[b, j] * 127 / max_j |x[b, j]|), zero-padded to kpad;
// sum[b] = sum_j q[b, j].
inline int64_t i8_kpad(int64_t k) { return (k + 255) / 256 * 256; }

struct I8Args {
  const void* w;  // packed weights of the first row of the range
  int64_t rows;
  int64_t k;
  const int8_t* xq;
  int64_t xq_stride;  // >= i8_kpad(k), multiple of 64
  const int32_t* xsum;
  int64_t batch;
  int32_t* y;  // y[b * ldy + r]
  int64_t ldy;
};

struct I8Ukernel {
  const char* name;
  int mr;
  int64_t (*packed_size)(int64_t m, int64_t k);
  int64_t (*row_bytes)(int64_t k);  // bytes per row (the layouts are row-major)
  void (*pack)(const uint32_t* packed, int64_t m, int64_t k, void* dst);
  // y[b, r] = sum_j w[r, j] q[b, j], exact in int32.
  void (*run)(const I8Args* args);
};

struct TernaryGemvUkernel {
  const char* name;  // the fp32 micro-kernel's full name (what list_variants reports)
  F32Ukernel f32;
  I8Ukernel i8;
};

struct Variant : cpukern::Variant<TernaryGemvUkernel> {};

// The registry table (registry.cc) and lookups.
const Registry<TernaryGemvUkernel>& registry();
// isa "" -> the default; otherwise by name (throws naming "isa").
const Variant& select_variant(const std::string& isa);

// Internal entry point: prepare for an explicit variant (used by prepare() and by tests
// of variants outside the registry, e.g. the SIMDe build of the AVX-512 micro-kernels).
std::shared_ptr<const PreparedWeights> prepare_variant(const Variant& v, const uint32_t* packed,
                                                       int64_t m, int64_t words, int64_t k,
                                                       const float* scale);

// Offset of the int8 layout inside PreparedWeights::data (the fp32 layout comes first).
inline int64_t i8_offset(const Variant& v, int64_t m, int64_t k) {
  return (v.ukernel.f32.packed_size(m, k) + 63) / 64 * 64;
}

// Scale epilogue (portable, in its own file): y[b, r] *= s(r), s = scale[r] (len m),
// scale[0] (len 1) or 1 (len 0).
void scale_epilogue_f32(float* y, int64_t batch, int64_t m, const float* scale,
                        int64_t scale_len);
// y[b, r] = float(acc[b, r]) * dq[b] * s(r).
void scale_epilogue_i8(const int32_t* acc, const float* dq, int64_t batch, int64_t m,
                       const float* scale, int64_t scale_len, float* y);

// Variants of the SIMDe build (only in the :simde library; for tests on any host).
const Variant* simde_variants(int* count);

}  // namespace cpukern::ternary
