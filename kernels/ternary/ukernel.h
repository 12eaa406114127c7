// Ternary GEMV micro-kernel interface (internal). One registry row = one fp32 micro-kernel
// plus one int8 micro-kernel. Micro-kernels are stateless and read weights in their own
// layout, written once by a packer (a module of its own: several packers may write one
// layout, prepare picks the best this CPU runs). The driver (driver.cc) does validation,
// packing, row tiling over the thread pool, int8 quantisation and the scale epilogue.
//
// Naming grammar: <op>_<out>_<lhs-layout>_<MR>x<NR>__<isa>, where op = ternary_gemv,
// out = f32 | i8 (activation/accumulation mode), lhs-layout = the weight layout word, MR =
// rows per tile, NR = 1 (GEMV); packers: ternary_pack_<layout>__<isa>. Activations are dense
// row-major, so the rhs-layout word is omitted. Layout words (ukernels/layouts.h):
//   t2p16     public format: 16 weights per uint32, 2 bits each, rows in order
//   t2p16r16  public words interleaved across 16-row tiles (word w of rows 0..15 adjacent)
//   lut3r8    8-row tiles; per 30 columns one 8x uint32 "add" pattern vector and one
//             "subtract" pattern vector, 3 bits per group of 3 columns (10 groups per lane)
//   lut27r16  16-row tiles; per 18 columns 16 uint32 lanes of six 5-bit base-3 codes
//   lut4r16   16-row tiles; per group of 4 columns 16 bytes, one per row: the add pattern
//             in bits 0-3, the subtract pattern in bits 4-7 (NEON tbl lookup)
//   q2b128    per row, per 128 columns 32 bytes; byte i holds (w+1) of columns i, i+32,
//             i+64, i+96 in bits 0-1, 2-3, 4-5, 6-7
//   q2b256    the same with 256 columns per 64 bytes
//   q2b128r4, q2b256r4  the same blocks, 4 rows interleaved block by block (one stream per
//             4-row tile); the last m % 4 rows row-major
//   b3p5c160  per row, per 160 columns 32 bytes of 5 base-3 trits each (1.6 bits/weight);
//             byte i holds columns i, i+32, ..., i+128 (layouts.h: encoding and decode)
//   b3p5c320  the same with 320 columns per 64 bytes
//
// Rules every micro-kernel follows:
//  - The tile grid starts at row 0; the driver passes ranges that start on a tile boundary.
//    A row's result never depends on which range or which other rows are computed with it,
//    so results are identical for any thread count.
//  - fp32-mode run/xprep functions contain no multiply instruction (checked by
//    tests/static/check_no_multiply.py): all offsets they need are passed in precomputed.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/common/registry.h"
#include "kernels/ternary/ternary.h"

namespace cpukern::ternary {

// ---- packers ------------------------------------------------------------------------------
struct Packer {
  const char* name;  // ternary_pack_<layout>__<isa>
  // Public words (m, words_for(k)) -> the layout: every byte of the micro-kernel's
  // packed_size(m, k) at dst (padding included). The driver packs row ranges in parallel:
  // rows [r0, r0 + m) with r0 on a tile boundary of every micro-kernel reading the layout
  // go to dst = layout + packed_size(r0, k), so a packer must give the same bytes for any
  // such split (rows never depend on other rows).
  void (*pack)(const uint32_t* packed, int64_t m, int64_t k, void* dst);
  // The inverse (the int8 layout is packed lazily from the fp32 one), by the same row
  // ranges; nullptr for layouts only int8 micro-kernels read.
  void (*unpack)(const void* src, int64_t m, int64_t k, uint32_t* packed);
};

struct PackerRow {
  uint64_t required;   // isa:: set of the library the packer comes from
  const char* layout;  // the layout word it writes (as micro-kernels name it)
  Packer packer;
  bool supported() const { return cpu_has(required); }
};

// Every packer of the kernel list (CPUKERN_PACKER lines, in list order).
const std::vector<PackerRow>& packers();
// The packer prepare uses for `layout`: the supported one needing the most CPU features
// (best_packer). Throws if none (a list without its packer).
const Packer& packer_for(const char* layout);

// ---- fp32 mode ----------------------------------------------------------------------------
// Precomputed geometry (computed by the ukernel's `geometry` function, outside run).
struct F32Geometry {
  int64_t tile_bytes = 0;  // bytes of packed weights per tile of `mr` rows
  int64_t x_bytes = 0;     // bytes of prepared activations per batch row (multiple of 64)
  int64_t p0 = 0, p1 = 0;  // kernel-specific (block counts etc.)
};

// Kernels that read public words (t2p16, t2p16r16): blocks of 16 columns, activations
// zero-padded to whole words.
inline F32Geometry word_geometry(int64_t k, int64_t tile_bytes_per_word) {
  F32Geometry g;
  g.p0 = words_for(k);
  g.p1 = k;
  g.tile_bytes = g.p0 * tile_bytes_per_word;
  g.x_bytes = g.p0 * 64;
  return g;
}
inline void xprep_padded(const float* x, const F32Geometry* geo, void* dst) {
  float* d = static_cast<float*>(dst);
  const int64_t n = geo->x_bytes >> 2, k = geo->p1;
  for (int64_t j = 0; j < n; ++j) d[j] = j < k ? x[j] : 0.0f;
}

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
  const char* layout;  // the weight layout it reads (its packers write it)
  int mr;              // rows per tile
  F32Geometry (*geometry)(int64_t m, int64_t k);
  int64_t (*packed_size)(int64_t m, int64_t k);  // bytes of the layout for (m, k)
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
  const char* layout;
  int mr;
  int64_t (*packed_size)(int64_t m, int64_t k);
  int64_t (*row_bytes)(int64_t k);  // bytes per row (the layouts are row-major)
  // y[b, r] = sum_j w[r, j] q[b, j], exact in int32.
  void (*run)(const I8Args* args);
};

struct TernaryGemvUkernel {
  const char* name;  // the fp32 micro-kernel's full name (what list_variants reports)
  F32Ukernel f32;
  I8Ukernel i8;
};

// A row of the kernel list (kernel_rows.h); registry(): the shipped rows and the catalogue
// (registry.cc).
using Variant = cpukern::Variant<TernaryGemvUkernel>;
const Registry<TernaryGemvUkernel>& registry();

// from_buffer (ternary.h) choosing the rows among `rows` instead of registry()'s (the
// serialize tests pass a registry that also holds the SIMDe rows).
std::shared_ptr<const PreparedWeights> from_buffer(const unsigned char* buf, int64_t size,
                                                   std::shared_ptr<const void> owner,
                                                   const ImportOptions& opts,
                                                   const Registry<TernaryGemvUkernel>& rows);

// Weights of row v for (m, k, group_size), layout and scales not yet set (driver.cc).
std::shared_ptr<PreparedWeights> new_weights(const Variant& v, int64_t m, int64_t k,
                                             int64_t group_size);

// Internal entry point: prepare for an explicit row (prepare(), from_buffer, and the tests'
// rows of the kernel list). Validates the codes (0b11, past k) but not the
// shapes (prepare checks those).
// into: pack straight into that serialised buffer instead (prepare_into; the int8 layout too
// when with_int8), which the result then views.
std::shared_ptr<const PreparedWeights> prepare_variant(const Variant& v, const uint32_t* packed,
                                                       int64_t m, int64_t k, const float* scale,
                                                       int threads = 0, int64_t group_size = 0,
                                                       const BlobTarget* into = nullptr,
                                                       bool with_int8 = false);

// The serialised sections' bytes (PreparedWeights::Section order) of row v's weights for
// (m, k, group_size), with scales or not, with the int8 layout or not (none when the variant's
// int8 kernel reads the fp32 layout): what prepare packs, serialize writes and from_buffer
// expects (serialize.cc).
void section_sizes(const Variant& v, int64_t m, int64_t k, int64_t group_size, bool has_scale,
                   bool with_int8, int64_t sizes[3]);

// Scale epilogue: y[b, r] *= s(r), s = scale[r] (len m), scale[0] (len 1) or 1 (len 0); a row
// run pre-scaled by 2**-e (exps[b] = e > 0, prescale.h) gets float(double(y) * s(r) * 2**e).
void scale_epilogue_f32(float* y, int64_t batch, int64_t m, const float* scale,
                        int64_t scale_len, const int* exps);
// y[b, r] = float(double(acc[b, r]) * dq[b] * s(r) * post[b]) for rows r in [r0, r1) (each
// row task scales its own rows while they are in cache): one fp32 rounding, and nothing
// overflows in double (|acc| < 2**31, dq and s fp32, post a power of two).
void scale_epilogue_i8(const int32_t* acc, const float* dq, const float* post, int64_t batch,
                       int64_t m, int64_t r0, int64_t r1, const float* scale, int64_t scale_len,
                       float* y);

}  // namespace cpukern::ternary
