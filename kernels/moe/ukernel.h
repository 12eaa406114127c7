// The micro-kernel interface of fused MoE (Ukernel), and the registry row built from it
// (GemmConfig: one micro-kernel per weight format).
//
// A ukernel is stateless: a tile shape, a weight packer (one expert, nn.Linear [o][i] order),
// an A (token rows) packer, a GEMM over a range of NR-column panels, and an activation hook
// compiled with the variant's ISA flags. The driver (driver.cc) is written once against it;
// micro-kernel files build theirs from a register tile with make_ukernel (gemm_loop.h). A
// ukernel knows nothing of the rows that use it: a row (the kernel list's line) is a
// GemmConfig naming the ukernel of each format, chosen once per CPU by the registry.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/common/bf16.h"
#include "kernels/common/registry.h"
#include "kernels/moe/moe.h"

namespace cpukern::moe {

// One expert's weights as its format stores them (nn.Linear [o][i] order), what a Ukernel's
// pack reads:
//   kBf16               values bf16 (o, i); scales unused
//   kMxfp4, kMxfp4A8    values = blocks uint8 (o, i/32, 16), two e2m1 codes a byte;
//                       scales = e8m0 uint8 (o, i/32); i % 32 == 0
//   kInt8               values = q int8 (o, i) in [-127, 127]; scales fp32 (o) per row
struct ExpertWeights {
  const void* values;
  const void* scales = nullptr;
};

struct Ukernel {
  const char* name;    // full micro-kernel name, e.g. "moe_gemm_f32_bf16p8x4_bf16p8x4_8x8__neon_bfmmla"
  const char* layout;  // weight packing family; packings of different families never mix
  int mr;              // rows of C per register tile
  int nr;              // columns per weight panel (the packing's N granularity)
  int kr;              // K is zero-padded to a multiple of kr in both packings

  // Bytes of one packed expert of shape (o, i).
  int64_t (*packed_size)(int64_t o, int64_t i);
  // Packs one expert, as its format stores it (ExpertWeights), into dst (packed_size(o, i)
  // bytes, zero-filled pads): the format's one pack function.
  void (*pack)(const ExpertWeights& w, int64_t o, int64_t i, void* dst);

  // Bytes of m packed A rows of length k.
  int64_t (*packed_a_size)(int64_t m, int64_t k);
  // Packs rows a[rows[r] * lda .. + k) for r < m (rows == nullptr: row r itself) into dst.
  void (*pack_a)(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k,
                 void* dst);

  // C[r][(p - p0) * nr + c] (= or +=) sum_k A[r][k] * W[p * nr + c][k] for r < m and
  // panels p in [p0, p1). w is one packed expert of k in-features. Columns past the expert's
  // o come out as zero (their weights are zero padding). c has ldc >= (p1 - p0) * nr.
  void (*gemm)(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0, int64_t p1,
               float* c, int64_t ldc, bool accumulate);

  // out[r][j] = bf16(act(gate + bias_g, up + bias_u)) for r < m, j < n.
  // interleaved (swigluoai): gate = g[r*ldc + 2j], up = g[r*ldc + 2j + 1], bias the same way
  //   (bias_g[2j], bias_g[2j+1]); u and bias_u unused.
  // concatenated: gate = g[r*ldc + j], up = u[r*ldc + j], bias bias_g[j] / bias_u[j].
  // Biases may be nullptr.
  void (*activation)(Activation act, int64_t m, int64_t n, const float* g, const float* u,
                     int64_t ldc, bool interleaved, const bf16_t* bias_g, const bf16_t* bias_u,
                     bf16_t* out, int64_t ldo);

  // The weight format this ukernel reads (ExpertWeights says what pack takes for each). A
  // kMxfp4 ukernel's packing holds 4.25 bits per weight, rearranged for its tile; its gemm
  // takes A packed by the same pack_a as the row's bf16 ukernel and computes, for every C
  // element, exactly the bf16 ukernel's operations on the decoded (exact) weights: results
  // equal those of the bf16 ukernel on the dequantized experts bit for bit.
  //
  // A kInt8 ukernel (W8A8): its pack_a quantises each bf16 row (int8::quantize_row, the same
  // bytes on every ISA) into its own A layout with the row's scale, so packed_a_size differs
  // from the row's bf16 ukernel's; its gemm gives C = float(double(exact int32 sum) * sa * sw),
  // bitwise equal to the scalar reference's on every variant (gemm_loop.h, "int8 tiles").
  //
  // A kMxfp4A8 ukernel (W4A8) packs the same inputs as kMxfp4, quantises A rows with
  // int8::quantize_row in its own pack_a, and gives C bitwise equal to the scalar reference's
  // on every variant (w4a8_loop.h: per-block exact int32 sums, one fp32 FMA per block, a
  // double epilogue).
  WeightFormat format = WeightFormat::kBf16;

  // Optional (AMX): the GEMM of calls with more than tiles_min_rows rows per expert on
  // average, over the same packed weights (its own A packing and tile height). The driver
  // chooses per call, from the caller's shapes only (ukernel_for_call), never per expert:
  // a token's result never depends on how the router spread the other tokens.
  const Ukernel* tiles = nullptr;
  int tiles_min_rows = 0;
};

// u running the tile GEMM `tiles` for calls of more than min_rows rows per expert.
constexpr Ukernel with_tiles(Ukernel u, const Ukernel* tiles, int min_rows) {
  u.tiles = tiles;
  u.tiles_min_rows = min_rows;
  return u;
}

// The ukernel a call runs on weights packed for u: its tile GEMM when the call has more
// than u.tiles_min_rows (token, expert) rows per expert (rows = T * topk, experts = E; a
// dense layer: T rows, one expert), else u itself.
inline const Ukernel& ukernel_for_call(const Ukernel& u, int64_t rows, int64_t experts) {
  return u.tiles && rows > int64_t(u.tiles_min_rows) * experts ? *u.tiles : u;
}

// A registry row's GEMM config: its ukernel per weight format (the kernel list's columns;
// every row has every format), as XNNPACK keeps a GEMM config per datatype apart from the
// operators. Adding a format's micro-kernel to a row is one column of its kernel-list line.
struct GemmConfig {
  const char* name;  // the bf16 ukernel's full name (what list_variants reports for the row)
  const Ukernel* formats[kNumFormats];
  const Ukernel& bf16() const { return *formats[int(WeightFormat::kBf16)]; }
};

// The registry row is the variant; prepared weights point at it.
using Variant = cpukern::Variant<GemmConfig>;

// The row's ukernel for weights of format f.
inline const Ukernel& ukernel_for(const Variant& v, WeightFormat f) {
  return *v.ukernel.formats[int(f)];
}

// The op's registry (the shipped rows and the catalogue), from the kernel list
// (ukernels/ukernels.inc).
const Registry<GemmConfig>& registry();
// The dense layer's (op "linear"): the same rows under its own name (moe.h, linear_variant).
const Registry<GemmConfig>& linear_registry();

// from_buffer (moe.h) looking the row up among `rows` instead of registry()'s (the serialize
// tests pass a registry that also holds the SIMDe rows).
std::shared_ptr<const PackedExperts> from_buffer(const unsigned char* buf, int64_t size,
                                                 std::shared_ptr<const void> owner,
                                                 const ImportOptions& opts,
                                                 const Registry<GemmConfig>& rows);

// prepare, prepare_mxfp4 and prepare_int8 (moe.h) for an explicit row (the tests' rows of the
// kernel list); `v` must outlive the packed experts.
std::shared_ptr<const PackedExperts> prepare(const bf16_t* w, int64_t e, int64_t o, int64_t i,
                                             const Variant& v, const BlobTarget* into = nullptr);
std::shared_ptr<const PackedExperts> prepare_mxfp4(const uint8_t* blocks, const uint8_t* scales,
                                                   int64_t e, int64_t o, int64_t i,
                                                   const Variant& v,
                                                   WeightFormat format = WeightFormat::kMxfp4,
                                                   const BlobTarget* into = nullptr);
std::shared_ptr<const PackedExperts> prepare_int8(const int8_t* q, const float* scales, int64_t e,
                                                  int64_t o, int64_t i, const Variant& v,
                                                  const BlobTarget* into = nullptr);

// The packed section's bytes: e experts of (o, i) packed by uk (overflow throws naming arg).
int64_t packed_bytes(const Ukernel& uk, int64_t e, int64_t o, int64_t i, const char* arg);

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace cpukern::moe
