// The stateless micro-kernel interface of the widely-linear layer (internal).
//
// A layer is S stages of four ternary planes (U_re, U_im, W_re, W_im), each (n, words)
// in the public 2-bit format. Per stage and row the layer needs 8 real dot products, the
// "sub-GEMVs" k = 0..7 below; the portable scale epilogue turns them into outputs:
//   y_re += s_Ure*d0 + s_Uim*d1 + s_Wre*d2 + s_Wim*d3
//   y_im += s_Uim*d4 + s_Ure*d5 + s_Wim*d6 + s_Wre*d7
// with d0 = U_re.x_re, d1 = U_im.(-x_im), d2 = W_re.x_re, d3 = W_im.x_im,
//      d4 = U_im.x_re, d5 = U_re.x_im,    d6 = W_im.x_re, d7 = W_re.(-x_im).
// -x_im (and -x_re, for kernels that select x or -x per lane) is computed once per call,
// so a sign flip is the choice of a source pointer (O3) and every scale term is added.
//
// A ukernel provides a fused run (all 8 sub-GEMVs of a row range in one pass over the
// bytes) and a single sub-GEMV run over the same bytes (the naive schedule, for the
// ablation). For a given variant both sum every dot product in the same order, so fused
// and unfused results are identical.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/common/registry.h"
#include "kernels/widely_linear/widely_linear.h"

namespace cpukern::widely_linear {

enum Plane : int { kUre = 0, kUim = 1, kWre = 2, kWim = 3 };
// Activation sources; the negation of source i is source i ^ 1.
enum Src : int { kXr = 0, kNXr = 1, kXi = 2, kNXi = 3 };

inline constexpr int kNumSub = 8;
inline constexpr int kSubPlane[kNumSub] = {kUre, kUim, kWre, kWim, kUim, kUre, kWim, kWre};
inline constexpr int kSubSrc[kNumSub] = {kXr, kNXi, kXr, kXi, kXr, kXi, kXr, kNXi};

struct Dims {
  int64_t stages = 0, n = 0, m = 0, words = 0;  // words == ceil(m / 16)
};

// One batch row of activations: src[kXr] = x_re, src[kNXr] = -x_re, src[kXi] = x_im,
// src[kNXi] = -x_im, each 64-byte aligned and zero-padded to words * 16 floats.
// table: the ukernel's own per-call activation table (see Ukernel::build_table), or null.
struct Acts {
  const float* src[4];
  const float* table = nullptr;
};

struct Ukernel {
  const char* name;       // fused micro-kernel, e.g. "widely_linear_f32_t2p16x4_1x1__avx2"
  const char* gemv_name;  // its single sub-GEMV micro-kernel (unfused schedule)
  int rows_per_tile;      // row ranges given to fused/gemv are best multiples of this
  // Bytes of the kernel layout for these dims.
  size_t (*packed_size)(const Dims& d);
  // Public planes (stages, 4, n, words) -> kernel layout (out has packed_size bytes, zeroed).
  void (*pack)(const uint32_t* planes, const Dims& d, void* out);
  // Optional (both null when unused): a per-call activation table, table_floats(d) floats
  // (64-byte aligned), built once per batch row from x.src and passed on as Acts::table.
  int64_t (*table_floats)(const Dims& d);
  void (*build_table)(const Acts& x, const Dims& d, float* table);
  // dots[(r - r0) * 8 + k] = sub-GEMV k of `stage` for rows r in [r0, r1).
  void (*fused)(const void* data, const Dims& d, int64_t stage, int64_t r0, int64_t r1,
                const Acts& x, float* dots);
  // dots[(r - r0) * 8 + k] for the one sub-GEMV k (other entries untouched).
  void (*gemv)(const void* data, const Dims& d, int64_t stage, int k, int64_t r0, int64_t r1,
               const Acts& x, float* dots);
};

// Portable scale epilogue (O4: scales applied once per row, after the reductions).
// dots: (r1 - r0, 8) for one stage; scales: that stage's (4, n) per-row scales.
// first: y = contribution, else y += contribution. y_re, y_im: (n,) of one batch row.
void scale_epilogue(const float* dots, const float* scales, int64_t n, int64_t r0, int64_t r1,
                    bool first, float* y_re, float* y_im);

// A registry row. Same layout as the generic row; PreparedLayer points at one.
struct Variant : cpukern::Variant<Ukernel> {};

const Registry<Ukernel>& registry();
// The Variant for a row of registry().variants().
const Variant& variant_of(const cpukern::Variant<Ukernel>& row);

// prepare() with an explicit variant (tests use this for flavours outside the table, such
// as the SIMDe build of the AVX-512 kernel). `v` must outlive the layer.
std::shared_ptr<const PreparedLayer> prepare_with(const Variant& v, const uint32_t* planes,
                                                  const float* scales, bool scales_per_row,
                                                  int64_t stages, int64_t n, int64_t words,
                                                  int64_t m);

// Boundary checks shared by dense() and prepare(); throw naming "planes", "m", "stages",
// "scales".
void validate_planes(const uint32_t* planes, int64_t stages, int64_t n, int64_t words, int64_t m);
void validate_scales(const float* scales, bool per_row, int64_t stages, int64_t n);

// Shared by every ukernel whose layout is the public one (t2p16x4): a copy.
size_t public_layout_size(const Dims& d);
void public_layout_pack(const uint32_t* planes, const Dims& d, void* out);
inline const uint32_t* public_plane(const void* data, const Dims& d, int64_t stage, int plane) {
  return static_cast<const uint32_t*>(data) + (stage * 4 + plane) * d.n * d.words;
}

}  // namespace cpukern::widely_linear
