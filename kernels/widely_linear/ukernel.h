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
// ablation), each for up to kMaxBatch batch rows per pass. For a given variant both sum
// every dot product in the same order, whatever the batch grouping, so fused and unfused
// results are identical and a batch row's result does not depend on its neighbours.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/registry.h"
#include "kernels/widely_linear/widely_linear.h"

namespace cpukern::widely_linear {

enum Plane : int { kUre = 0, kUim = 1, kWre = 2, kWim = 3 };
// Activation sources; the negation of source i is source i ^ 1.
enum Src : int { kXr = 0, kNXr = 1, kXi = 2, kNXi = 3 };

inline constexpr int kNumSub = 8;
inline constexpr int kSubPlane[kNumSub] = {kUre, kUim, kWre, kWim, kUim, kUre, kWim, kWre};
inline constexpr int kSubSrc[kNumSub] = {kXr, kNXi, kXr, kXi, kXr, kXi, kXr, kNXi};
// Plane p feeds sub-GEMVs kPlaneSubA[p] (real output) and kPlaneSubB[p] (imaginary output).
inline constexpr int kPlaneSubA[4] = {0, 1, 2, 3};
inline constexpr int kPlaneSubB[4] = {5, 4, 7, 6};

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

// Batch rows one micro-kernel call processes together: each decoded mask / pattern is used
// for all of them (separate accumulators), so weight bytes and decode work are amortised.
inline constexpr int kMaxBatch = 4;

// Where rows start in a kernel layout and how to step through them. Filled by the layout's
// portable locate() (driver.cc, lookup_layout.cc), so that the micro-kernels do all their
// addressing with adds and shifts: no multiply instruction in them, not even for offsets.
struct Loc {
  const void* w = nullptr;   // plane `plane` of the first tile (row) of the call
  int64_t tile_stride = 0;   // bytes from one tile (row) to the next
  int64_t plane_stride = 0;  // bytes from one plane to the next of the same tile (row)
  int64_t inner = 0;         // chunks (lookup layouts) or words (public layout) per tile
};

// One micro-kernel call: rows [r0, r0 + rows) of one stage (r0 a multiple of
// rows_per_tile) for nb batch rows. dots[b][i * 8 + k] = sub-GEMV k of row r0 + i, batch b.
struct Call {
  Loc loc;
  int64_t rows = 0;
  int nb = 1;
  int k = 0;  // the sub-GEMV (gemv only; loc then points at plane kSubPlane[k])
  // fused_batch only: the batch group's interleaved table (Ukernel::build_table_batch).
  const float* gtable = nullptr;
  Acts x[kMaxBatch];
  float* dots[kMaxBatch] = {};
};

using PackFn = void (*)(const uint32_t* planes, const Dims& d, void* out);

// A kernel layout of the packed planes: its size, where rows start, and the per-call
// activation tables its kernels read. Packers write it; micro-kernels read it.
struct Layout {
  const char* name;  // "t2p16x4" (the public layout), "g3r8x4", "g4r16x4"
  // Bytes of the layout for these dims.
  size_t (*packed_size)(const Dims& d);
  // Loc of plane `plane` of the tile holding row r0 of `stage` (portable, may multiply).
  Loc (*locate)(const void* data, const Dims& d, int64_t stage, int plane, int64_t r0);
  // Optional (null when unused): a per-call activation table, table_floats(d) floats
  // (64-byte aligned), built once per batch row from x.src and passed on as Acts::table;
  // and the batch group's interleaved table for Ukernel::fused_batch (Call::gtable), built
  // from the rows' own tables.
  int64_t (*table_floats)(const Dims& d);
  void (*build_table)(const Acts& x, const Dims& d, float* table);
  int64_t (*table_floats_batch)(const Dims& d);
  void (*build_table_batch)(const Acts* x, int nb, const Dims& d, float* table);
};

namespace layouts {
extern const Layout t2p16x4, g3r8x4, g4r16x4;  // ukernels/layouts.cc
}  // namespace layouts

struct Ukernel {
  const char* name;       // fused micro-kernel, e.g. "widely_linear_f32_f32_g3r8x4_8x1__avx2"
  const char* gemv_name;  // its single sub-GEMV micro-kernel (unfused schedule)
  const Layout* layout;   // what prepare() packs the planes into (by a packer of packers())
  int rows_per_tile;      // row ranges given to fused/gemv are multiples of this
  // All 8 sub-GEMVs of the call's rows in one pass over their bytes (loc: plane 0).
  void (*fused)(const Call& c);
  // The one sub-GEMV c.k (other dots entries untouched), summed in the fused order.
  void (*gemv)(const Call& c);
  // Optional (null when unused): a fused kernel for 2..kMaxBatch batch rows, bitwise equal
  // to `fused`, reading Call::gtable. It wants row ranges of about batch_rows rows (a
  // multiple of rows_per_tile).
  void (*fused_batch)(const Call& c) = nullptr;
  int batch_rows = 0;
};

// A packer: public planes (stages, 4, n, words) -> `layout` (out has packed_size bytes,
// zeroed). Every packer of a layout writes the same bytes.
struct Packer {
  const char* name;
  const Layout* layout;
  uint64_t required;  // an isa:: set
  PackFn pack;
  bool supported() const { return cpu_has(required); }
};

// Portable scale epilogue (O4: scales applied once per row, after the reductions).
// dots: (r1 - r0, 8) for one stage; scales: that stage's (4, n) per-row scales.
// first: y = contribution, else y += contribution. y_re, y_im: (n,) of one batch row.
// up: 1, or 2**e for a batch row the driver ran as x * 2**-e (prescale.h); then each stage's
// contribution is summed in double (exact products) and rounded to fp32 once.
void scale_epilogue(const float* dots, const float* scales, int64_t n, int64_t r0, int64_t r1,
                    bool first, float* y_re, float* y_im, double up = 1.0);

// The registry (the shipped rows and the catalogue) and the packers, from the kernel list.
const Registry<Ukernel>& registry();
const std::vector<Packer>& packers();
// The packer prepare() uses for `layout` on this CPU.
const Packer& packer_for(const Layout& layout);

// from_buffer (widely_linear.h) choosing the rows among `rows` instead of registry()'s (the
// serialize tests pass a registry that also holds the SIMDe rows).
std::shared_ptr<const PreparedLayer> from_buffer(const unsigned char* buf, int64_t size,
                                                 std::shared_ptr<const void> owner,
                                                 const ImportOptions& opts,
                                                 const Registry<Ukernel>& rows);

// prepare() with an explicit row (prepare(), from_buffer, and the tests' rows of the kernel
// list). `v` must outlive
// the layer.
// into: pack straight into that serialised buffer instead (prepare's `into`).
std::shared_ptr<const PreparedLayer> prepare_with(const Variant& v, const uint32_t* planes,
                                                  const float* scales, bool scales_per_row,
                                                  int64_t stages, int64_t n, int64_t words,
                                                  int64_t m, const BlobTarget* into = nullptr);

// The serialised sections' bytes (PreparedLayer::Section order) of row v's layer of dims d:
// what prepare packs, serialize writes and from_buffer expects (serialize.cc).
void section_sizes(const Variant& v, const Dims& d, int64_t sizes[2]);

// Boundary checks shared by dense() and prepare(); throw naming "planes", "m", "stages",
// "scales". check_plane_dims: validate_planes' checks of the dims alone (prepared_size).
void check_plane_dims(int64_t stages, int64_t n, int64_t words, int64_t m);
void validate_planes(const uint32_t* planes, int64_t stages, int64_t n, int64_t words, int64_t m);
void validate_scales(const float* scales, bool per_row, int64_t stages, int64_t n);

}  // namespace cpukern::widely_linear
