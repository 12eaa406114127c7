// The blocked GEMM of every fused-MoE micro-kernel (Ukernel::gemm), written once over tile
// traits T. Each micro-kernel file instantiates it (make_ukernel<T>) so that it compiles with
// that file's ISA flags; T provides only the register tile and the packers:
//   kMR, kNR, kKR   rows per tile, columns per weight panel, k per step
//   kNP             panels one tile call may cover (a wider tile for few rows)
//   kNPGemv         panels per tile call when the whole chunk is one row block (decode: no
//                   K blocking, each panel streamed once); 0 (default): kNP. More panels give
//                   a 1-2 row tile independent accumulator chains without splitting any sum
//   kBlockK         K blocking when a chunk has several row blocks
//   kPrefetchGemv   bytes ahead in each panel that a one-row-block call (decode) prefetches;
//                   0 (default): none, the hardware prefetcher alone
//   A, kARows       packed A element type; packed_a rows come in groups of kARows
//   a_stride(k)     A elements from row r to row r + 1 (row blocks start at r * a_stride)
//   kAStep          A elements per k step, from the start of a row block
//   rows(rem)       the next row block's height with rem rows left (the row split)
//   tile<M>(a, lda, nk, w, panel, np, c, ldc, accumulate, pf)
//                   C[M][np * kNR] (= or +=) nk k steps of A x np panels (panel = bf16 from
//                   one panel to the next); pf > 0: prefetch pf bytes ahead of w
//   pack, pack_a, kActW (the activation's vector width)
//   W, kStepW       weight element type and W per (panel, k step); defaults: bf16, kNR * kKR
//                   (every bf16 layout is [panel][k step][kNR][kKR] bf16, zero-padded);
//                   MXFP4 tiles: uint8, k step = one 32-k block (kNR scales + 16 kNR bytes)
//   kFormat         the weight format (T::pack packs bf16, T::pack_mxfp4 MXFP4)
//   Scope           optional: constructed once per gemm call before the first tile and
//                   destroyed after the last (AMX: loads the tile configuration, releases it)
//   kDecodeAlways   with Decoded: decode for every row count, not only for several row
//                   blocks (the AMX tiles, whose in-register decode would be another path)
//   Decoded, decode_block(src, nk, dst)   optional (quantized tiles): the tile that runs over
//                   decoded weights (a bf16 tile, or a tile over exact fp32 weights), and
//                   decode_block, which decodes nk k steps of ONE panel (from src) into
//                   nk * kKR / Decoded::kKR k steps of Decoded's packed layout (elements
//                   Decoded::W), exactly the values the dequantized weights give. With several
//                   row blocks (prefill), the loop then decodes each (panel, K block) once into
//                   a small per-call stack buffer (one K block of kNP panels: 8-16 KiB,
//                   L1-resident; never a copy of the weights) and runs the Decoded tile over it
//                   for every row block: the same operations on the same values as the bf16
//                   kernel (bitwise equal results), with the decode amortised over the row
//                   blocks. One row block (decode GEMV) keeps the tile's in-register decode
//                   (weights stream once, no buffer).
// Batch invariance: every tile computes each output element as ONE fp32 accumulation chain,
// sequential in k (continued across K blocks through C, which is exact), for every row count M
// and panel count. A token's result therefore does not depend on how many rows share its
// block, on the row split, on the K blocking or on the column split: the whole batch, the
// token alone and any chunking give the same bits. Tiles hide the FMA latency with more
// rows or more panels (independent chains), never by splitting a sum (no even/odd-k
// accumulators, no partial sums combined at the end).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/moe/activations.h"
#include "kernels/moe/int8.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {

// K block: a panel's next kKBlock k (NR x 256 bf16: 8 KiB at NR = 16) stay in L1 while every
// row block of the chunk uses them, and the block after is prefetched meanwhile, so a panel
// streams from memory once however many rows the expert has.
inline constexpr int64_t kKBlock = 256;

struct TileDefaults {
  static constexpr int kNP = 1, kNPGemv = 0, kARows = 1, kStepW = 0, kPrefetchGemv = 0;
  static constexpr bool kBlockK = false, kDecodeAlways = false;
  static constexpr WeightFormat kFormat = WeightFormat::kBf16;
  using W = bf16_t;
};

// An MXFP4 tile over a bf16 tile Base: the same register tile, its k step one 32-k block per
// column, kBlockBytes bytes per panel and k step.
template <class Base, int kBlockBytes>
struct Mxfp4TileOver : Base {
  static constexpr int kKR = mxfp4::kBlock, kAStep = mxfp4::kBlock, kStepW = kBlockBytes;
  static constexpr WeightFormat kFormat = WeightFormat::kMxfp4;
  using W = uint8_t;
  // Prefill (decoded_gemm, Decoded = a bf16 tile over k pairs): nk blocks of one panel -> the
  // bf16 tile's pair words, store(s, kk, d) writing k pair kk of source s's current block as
  // Base::kNR words at d.
  template <class Src, class Store>
  static void decode_pairs(const uint8_t* src, int64_t nk, bf16_t* dst, Store&& store) {
    Src s(src);
    auto* d = reinterpret_cast<uint32_t*>(dst);
    for (int64_t b = 0; b < nk; ++b) {
      s.block(b);
      for (int kk = 0; kk < mxfp4::kBlock / 2; ++kk) store(s, kk, d + (b * 16 + kk) * Base::kNR);
    }
  }
};

// Weight elements per (panel, k step).
template <class T>
constexpr int64_t step_w() {
  return T::kStepW > 0 ? int64_t(T::kStepW) : int64_t(T::kNR) * T::kKR;
}

template <class T, int M = 1, class... Args>
inline void tile_rows(int64_t mb, Args... args) {
  if constexpr (M < T::kMR) {
    if (mb != M) return tile_rows<T, M + 1>(mb, args...);
  }
  T::template tile<M>(args...);
}

// The panels [j, np) of one tile call, G per register tile, the rest Rest per register tile
// (default: G/2, then G/4, ...; Rest = 1: one at a time): call(std::integral_constant<int, g>{},
// j0) covers panels [j0, j0 + g).
template <int G, int Rest = G / 2, class F>
inline void panel_groups(int np, F&& call, int j = 0) {
  for (; j + G <= np; j += G) call(std::integral_constant<int, G>{}, j);
  if constexpr (G > 1)
    if (j < np) panel_groups<Rest, Rest / 2>(np, call, j);
}

// T::Scope, or nothing.
template <class T, class = void>
struct scope_of {
  struct type {};
};
template <class T>
struct scope_of<T, std::void_t<typename T::Scope>> {
  using type = typename T::Scope;
};

template <class T, class = void>
struct has_decode : std::false_type {};
template <class T>
struct has_decode<T, std::void_t<typename T::Decoded>> : std::true_type {};

// Every row block of one (panel, K block) over the decoded buffer. Kept out of line: inlined
// into decoded_gemm, GCC spilled the 5-row tile's accumulators (a store-forwarding chain per
// k pair, 2x slower than the bf16 kernel's own loop).
template <class B>
[[gnu::noinline]] void decoded_rows(const typename B::A* a, int64_t m, int64_t lda, int64_t nk,
                                    const typename B::W* buf, int64_t bpanel, int np, float* c,
                                    int64_t ldc, bool accumulate) {
  for (int64_t rr = 0, mb; rr < m; rr += mb) {
    mb = B::rows(m - rr);
    tile_rows<B>(mb, a + rr * lda, lda, nk, buf, bpanel, np, c + rr * ldc, ldc, accumulate,
                 int64_t(0));
  }
}

// Several row blocks over quantized weights: decode each (panel, K block) once into buf, then
// the Decoded tile for every row block (the K blocks and row blocks of
// blocked_gemm<Decoded>). Every K block after the first accumulates into C (the sum
// continues, never restarts).
template <class T>
void decoded_gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0,
                  int64_t p1, float* c, int64_t ldc, bool accumulate) {
  using B = typename T::Decoded;
  static_assert(B::kNR == T::kNR && B::kNP == T::kNP && T::kKR % B::kKR == 0);
  static_assert(B::kBlockK && kKBlock % T::kKR == 0, "K blocks must match the bf16 kernel's");
  static_assert(std::is_same_v<typename T::A, typename B::A>);
  constexpr int64_t r = T::kKR / B::kKR;  // decoded k steps per quantized k step
  static_assert(T::kAStep == B::kAStep * r);
  constexpr int64_t kb = kKBlock / T::kKR, bpanel = kb * r * step_w<B>();
  // Per-call scratch of one K block (kNP panels of kKBlock k): the decoded weights live only
  // here, in L1, while the row blocks use them.
  alignas(64) typename B::W buf[T::kNP * bpanel];
  [[maybe_unused]] const typename scope_of<B>::type scope;
  const auto* a = static_cast<const typename T::A*>(a_packed);
  const auto* wb = static_cast<const typename T::W*>(w);
  const int64_t ks = round_up(k, T::kKR) / T::kKR, lda = T::a_stride(k);
  const int64_t step = step_w<T>(), panel = ks * step;
  for (int64_t p = p0; p < p1; p += T::kNP) {
    const int np = int(std::min<int64_t>(T::kNP, p1 - p));
    float* cp = c + (p - p0) * T::kNR;
    for (int64_t k0 = 0; k0 < ks; k0 += kb) {
      const int64_t nk = std::min(kb, ks - k0);
      for (int j = 0; j < np; ++j) {
        const auto* src = wb + (p + j) * panel + k0 * step;
        if (k0 + kb < ks) {  // the panel's next K block, while this one is computed
          const char* nx = reinterpret_cast<const char*>(src + kb * step);
          for (int64_t o = 0; o < int64_t(std::min(kb, ks - k0 - kb) * step * sizeof(*src)); o += 64)
            __builtin_prefetch(nx + o);
        }
        T::decode_block(src, nk, buf + j * bpanel);
      }
      decoded_rows<B>(a + k0 * T::kAStep, m, lda, nk * r, buf, bpanel, np, cp, ldc,
                      accumulate || k0 > 0);
    }
  }
}

template <class T>
void blocked_gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0,
                  int64_t p1, float* c, int64_t ldc, bool accumulate) {
  if constexpr (has_decode<T>::value) {
    if (m > T::kMR || T::kDecodeAlways)
      return decoded_gemm<T>(a_packed, m, k, w, p0, p1, c, ldc, accumulate);
  }
  [[maybe_unused]] const typename scope_of<T>::type scope;
  const auto* a = static_cast<const typename T::A*>(a_packed);
  using W = typename T::W;
  const auto* wb = static_cast<const W*>(w);
  const int64_t ks = round_up(k, T::kKR) / T::kKR, lda = T::a_stride(k);
  const int64_t step = step_w<T>(), panel = ks * step;
  // One row block: no K blocking (a decode GEMV streams each panel in one pass, and the
  // hardware prefetcher keeps up with a plain stream), and kNPGemv panels per tile call.
  const int64_t kb = T::kBlockK && m > T::kMR ? kKBlock / T::kKR : ks;
  const int64_t pf = kb < ks ? kb * step * int64_t(sizeof(W)) : T::kPrefetchGemv;
  const int64_t npc = m > T::kMR || T::kNPGemv == 0 ? T::kNP : T::kNPGemv;
  for (int64_t p = p0; p < p1; p += npc) {
    const int np = int(std::min<int64_t>(npc, p1 - p));
    float* cp = c + (p - p0) * T::kNR;
    for (int64_t k0 = 0; k0 < ks; k0 += kb) {
      const int64_t nk = std::min(kb, ks - k0);
      const W* wk = wb + p * panel + k0 * step;
      for (int64_t r = 0, mb; r < m; r += mb) {
        mb = T::rows(m - r);
        tile_rows<T>(mb, a + r * lda + k0 * T::kAStep, lda, nk, wk, panel, np, cp + r * ldc, ldc,
                     accumulate || k0 > 0, pf);
      }
    }
  }
}

// ---- int8 (W8A8) tiles ---------------------------------------------------------------------
// An int8 tile's traits Q (kFormat = kInt8; TileDefaults for the rest) give only the register
// tile and its operand order; the layouts' frames, the activation quantisation (int8.h), the
// loop and the fp32 epilogue are written once here:
//   kMR, kNR, kKR, kNP, kActW, rows(rem)   as for the float tiles
//   A, a_stride(k)     packed A element type (int8_t, or int16_t for a widening tile) and the
//                      elements from one row to the next
//   put_a(q, k, r, rows, lda)   optional: stores row r's k quantised values (zero past k up to
//                      a_stride) in the tile's A order; default (Int8TileDefaults): row-major,
//                      widened to A. Row-interleaved tiles (SMMLA: 2 rows x 8 k) override it
//                      and set kARows; the loop passes each row block as rows + r0 * lda.
//   w_at(col, kk)      byte of weight (col, kk) inside its k step of kNR * kKR bytes
//   tile<M>(a, lda, ks, w, panel, np, acc, ldacc)
//                      acc[r][j * kNR + c] = the exact int32 sum over ks k steps of A row r x
//                      column c of panel j (w = the first panel's first k step, panel = bytes
//                      from one panel to the next), for r < M, j < np <= kNP; overwrites acc.
// Layouts: packed weights = per panel of kNR columns, kNR fp32 scales sw (0 past o), then
// ceil(k / kKR) k steps of kNR * kKR int8 (zero padding); packed A = round_up(m, 16) fp32 sa,
// then round_up(m, kARows) rows of a_stride(k) A elements.
// A new ISA's int8 tile (e.g. NEON SDOT on the "qc8wp16x4" order of int8_generic.h) is one
// such traits struct in one file; the sums are exact integers, so it may split and reorder them
// freely (no batch-invariance constraint) and still equal the reference bit for bit.
// How far ahead in each panel's stream the int8 tiles prefetch (both x86 int8 tiles: gpt-oss-20b
// at T=1 on Zen 5 ran 1.1x faster with it than with the hardware prefetcher alone).
constexpr int64_t kInt8PrefetchBytes = 2048;

namespace {  // internal linkage: put_a is compiled per ISA
struct Int8TileDefaults : TileDefaults {
  static constexpr WeightFormat kFormat = WeightFormat::kInt8;
  static constexpr int kStepW = 0;
  using W = int8_t;
  template <class A>
  static void put_a(const int8_t* q, int64_t k, int64_t r, A* rows, int64_t lda) {
    A* d = rows + r * lda;
    for (int64_t j = 0; j < k; ++j) d[j] = A(q[j]);
    for (int64_t j = k; j < lda; ++j) d[j] = A(0);
  }
};
}  // namespace

namespace {  // internal linkage: compiled per ISA
inline int64_t int8_a_header(int64_t m) { return round_up(m, 16) * int64_t(sizeof(float)); }
}  // namespace
template <class T>
int64_t int8_panel_bytes(int64_t k) {
  return T::kNR * int64_t(sizeof(float)) + round_up(k, T::kKR) * T::kNR;
}

template <class T>
int64_t int8_packed_size(int64_t o, int64_t i) {
  return round_up(o, T::kNR) / T::kNR * int8_panel_bytes<T>(i);
}

template <class T>
void int8_pack(const int8_t* q, const float* scales, int64_t o, int64_t i, void* dst) {
  const int64_t panels = round_up(o, T::kNR) / T::kNR, ks = round_up(i, T::kKR) / T::kKR;
  char* d = static_cast<char*>(dst);
  for (int64_t p = 0; p < panels; ++p) {
    char* dp = d + p * int8_panel_bytes<T>(i);
    for (int c = 0; c < T::kNR; ++c) {
      const int64_t n = p * T::kNR + c;
      const float s = n < o ? scales[n] : 0.0f;
      std::memcpy(dp + c * sizeof(float), &s, sizeof(float));
    }
    int8_t* w = reinterpret_cast<int8_t*>(dp + T::kNR * sizeof(float));
    for (int64_t st = 0; st < ks; ++st)
      for (int c = 0; c < T::kNR; ++c)
        for (int kk = 0; kk < T::kKR; ++kk) {
          const int64_t n = p * T::kNR + c, j = st * T::kKR + kk;
          w[st * T::kNR * T::kKR + T::w_at(c, kk)] = n < o && j < i ? q[n * i + j] : int8_t(0);
        }
  }
}

template <class T>
int64_t int8_packed_a_size(int64_t m, int64_t k) {
  return int8_a_header(m) +
         round_up(m, T::kARows) * T::a_stride(k) * int64_t(sizeof(typename T::A));
}

template <class T>
void int8_pack_a(const bf16_t* a, int64_t lda, const int32_t* rows, int64_t m, int64_t k,
                 void* dst) {
  using A = typename T::A;
  float* sa = static_cast<float*>(dst);
  A* out = reinterpret_cast<A*>(static_cast<char*>(dst) + int8_a_header(m));
  // One row's quantised values (the scale needs the whole row's amax first).
  static thread_local std::vector<int8_t> q;
  q.assign(size_t(k), int8_t(0));
  for (int64_t r = 0; r < round_up(m, T::kARows); ++r) {
    if (r < m)
      sa[r] = int8::quantize_row(a + (rows ? int64_t(rows[r]) : r) * lda, k, q.data());
    else
      std::fill(q.begin(), q.end(), int8_t(0));  // the rest of a kARows group
    T::put_a(q.data(), k, r, out, T::a_stride(k));
  }
  for (int64_t r = m; r < round_up(m, 16); ++r) sa[r] = 0.0f;
}

// The panel loop of the int8 and W4A8 tiles, written once: per group of up to T::kNP panels
// (pb bytes apart, each led by its T::kNR fp32 column scales sw), per row block of T::rows(),
// tile(r, mb, wp, np, acc, ncol) leaves the block's exact sums in acc[mb][ncol] (Acc: int32
// or fp32) and C (= or +=) float(double(acc) * double(sa) * double(sw)) (int8.h: why double).
// No product is fused with the accumulating add: the only fp32 value is the rounded epilogue,
// and a conversion separates it from any multiply.
template <class T, class Acc, class Tile>
inline void scaled_panels(int64_t m, const float* sa, const char* wb, int64_t pb, int64_t p0,
                          int64_t p1, float* c, int64_t ldc, bool accumulate, Tile&& tile) {
  alignas(64) Acc acc[T::kMR * T::kNP * T::kNR];
  alignas(64) float sw[T::kNP * T::kNR];
  for (int64_t p = p0; p < p1; p += T::kNP) {
    const int np = int(std::min<int64_t>(T::kNP, p1 - p));
    const char* wp = wb + p * pb;
    const int64_t ncol = int64_t(np) * T::kNR;
    float* cp = c + (p - p0) * T::kNR;
    for (int j = 0; j < np; ++j)  // the panels' column scales
      std::memcpy(sw + j * T::kNR, wp + j * pb, T::kNR * sizeof(float));
    for (int64_t r = 0, mb; r < m; r += mb) {
      mb = T::rows(m - r);
      tile(r, mb, wp, np, acc, ncol);
      for (int64_t rr = 0; rr < mb; ++rr) {
        float* cr = cp + (r + rr) * ldc;
        const double s = double(sa[r + rr]);
        for (int64_t col = 0; col < ncol; ++col) {
          const float v = float(double(acc[rr * ncol + col]) * s * double(sw[col]));
          cr[col] = accumulate ? cr[col] + v : v;
        }
      }
    }
  }
}

template <class T>
void int8_gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0, int64_t p1,
               float* c, int64_t ldc, bool accumulate) {
  const float* sa = static_cast<const float*>(a_packed);
  const auto* a = reinterpret_cast<const typename T::A*>(static_cast<const char*>(a_packed) +
                                                         int8_a_header(m));
  const int64_t ks = round_up(k, T::kKR) / T::kKR, lda = T::a_stride(k);
  const int64_t pb = int8_panel_bytes<T>(k);
  [[maybe_unused]] const typename scope_of<T>::type scope;
  scaled_panels<T, int32_t>(
      m, sa, static_cast<const char*>(w), pb, p0, p1, c, ldc, accumulate,
      [&](int64_t r, int64_t mb, const char* wp, int np, int32_t* acc, int64_t ncol) {
        tile_rows<T>(mb, a + r * lda, lda, ks,
                     reinterpret_cast<const int8_t*>(wp + T::kNR * sizeof(float)), pb, np, acc,
                     ncol);
      });
}

template <class T>
int64_t packed_size(int64_t o, int64_t i) {
  return round_up(o, T::kNR) / T::kNR * (round_up(i, T::kKR) / T::kKR) * step_w<T>() *
         int64_t(sizeof(typename T::W));
}
template <class T>
int64_t packed_a_size(int64_t m, int64_t k) {
  return round_up(m, T::kARows) * T::a_stride(k) * int64_t(sizeof(typename T::A));
}
template <class T>
void activation(Activation act, int64_t m, int64_t n, const float* g, const float* u, int64_t ldc,
                bool interleaved, const bf16_t* bg, const bf16_t* bu, bf16_t* out, int64_t ldo) {
  act::activation_rows<T::kActW>(act, m, n, g, u, ldc, interleaved, bg, bu, out, ldo);
}

// The one pack function of each format (Ukernel::pack) over T's typed packer.
template <class T>
void pack_bf16(const ExpertWeights& w, int64_t o, int64_t i, void* dst) {
  T::pack(static_cast<const bf16_t*>(w.values), o, i, dst);
}
template <class T>
void pack_mxfp4(const ExpertWeights& w, int64_t o, int64_t i, void* dst) {
  T::pack_mxfp4(static_cast<const uint8_t*>(w.values), static_cast<const uint8_t*>(w.scales), o,
                i, dst);
}
template <class T>
void pack_int8(const ExpertWeights& w, int64_t o, int64_t i, void* dst) {
  int8_pack<T>(static_cast<const int8_t*>(w.values), static_cast<const float*>(w.scales), o, i,
               dst);
}

// The Ukernel of tile traits T (`name` = the symbol's name, `layout` = the packing family).
template <class T>
constexpr Ukernel make_ukernel(const char* name, const char* layout) {
  if constexpr (T::kFormat == WeightFormat::kInt8) {
    return {name,           layout,         T::kMR,        T::kNR,
            T::kKR,         int8_packed_size<T>, pack_int8<T>, int8_packed_a_size<T>,
            int8_pack_a<T>, int8_gemm<T>,   activation<T>, T::kFormat};
  } else if constexpr (T::kFormat == WeightFormat::kBf16) {
    return {name,           layout,         T::kMR,           T::kNR,
            T::kKR,         packed_size<T>, pack_bf16<T>,     packed_a_size<T>,
            T::pack_a,      blocked_gemm<T>, activation<T>};
  } else {
    return {name,           layout,          T::kMR,           T::kNR,
            T::kKR,         packed_size<T>,  pack_mxfp4<T>,    packed_a_size<T>,
            T::pack_a,      blocked_gemm<T>, activation<T>,    T::kFormat};
  }
}

}  // namespace cpukern::moe
