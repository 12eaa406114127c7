// The blocked GEMM of every fused-MoE micro-kernel (Ukernel::gemm), written once over tile
// traits T. Each micro-kernel file instantiates it (make_ukernel<T>) so that it compiles with
// that file's ISA flags; T provides only the register tile and the packers:
//   kMR, kNR, kKR   rows per tile, columns per weight panel, k per step
//   kNP             panels one tile call may cover (a wider tile for few rows)
//   kNPGemv         panels per tile call when the whole chunk is one row block (decode: no
//                   K blocking, each panel streamed once); 0 (default): kNP. More panels give
//                   a 1-2 row tile independent accumulator chains without splitting any sum
//   kBlockK         K blocking when a chunk has several row blocks
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
//   kFormat         the weight format (pack for bf16, pack_mxfp4 for MXFP4)
//   Bf16, decode_block(src, nk, dst)   optional (quantized tiles): the bf16 tile whose packed
//                   layout decode_block writes; it decodes nk k steps of ONE panel (from src)
//                   into nk * kKR / Bf16::kKR bf16 k steps of that layout, exactly the bf16 the
//                   dequantized weights pack to. With several row blocks (prefill), the loop
//                   then decodes each (panel, K block) once into a small per-call stack buffer
//                   (one K block of kNP panels: 8-16 KiB, L1-resident; never a bf16 copy of the
//                   weights) and runs the Bf16 tile over it for every row block: the same
//                   operations on the same values as the bf16 kernel (bitwise equal results),
//                   with the decode amortised over the row blocks. One row block (decode GEMV)
//                   keeps the tile's in-register decode (weights stream once, no buffer).
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
#include <type_traits>

#include "kernels/moe/activations.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {

// K block: a panel's next kKBlock k (NR x 256 bf16: 8 KiB at NR = 16) stay in L1 while every
// row block of the chunk uses them, and the block after is prefetched meanwhile, so a panel
// streams from memory once however many rows the expert has.
inline constexpr int64_t kKBlock = 256;

struct TileDefaults {
  static constexpr int kNP = 1, kNPGemv = 0, kARows = 1, kStepW = 0;
  static constexpr bool kBlockK = false;
  static constexpr WeightFormat kFormat = WeightFormat::kBf16;
  using W = bf16_t;
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

template <class T, class = void>
struct has_decode : std::false_type {};
template <class T>
struct has_decode<T, std::void_t<typename T::Bf16>> : std::true_type {};

// Every row block of one (panel, K block) over the decoded buffer. Kept out of line: inlined
// into decoded_gemm, GCC spilled the 5-row tile's accumulators (a store-forwarding chain per
// k pair, 2x slower than the bf16 kernel's own loop).
template <class B>
[[gnu::noinline]] void decoded_rows(const typename B::A* a, int64_t m, int64_t lda, int64_t nk,
                                    const bf16_t* buf, int64_t bpanel, int np, float* c,
                                    int64_t ldc, bool accumulate) {
  for (int64_t rr = 0, mb; rr < m; rr += mb) {
    mb = B::rows(m - rr);
    tile_rows<B>(mb, a + rr * lda, lda, nk, buf, bpanel, np, c + rr * ldc, ldc, accumulate,
                 int64_t(0));
  }
}

// Several row blocks over quantized weights: decode each (panel, K block) once into buf, then
// the Bf16 tile for every row block (the K blocks and row blocks of blocked_gemm<Bf16>). Every
// K block after the first accumulates into C (the sum continues, never restarts).
template <class T>
void decoded_gemm(const void* a_packed, int64_t m, int64_t k, const void* w, int64_t p0,
                  int64_t p1, float* c, int64_t ldc, bool accumulate) {
  using B = typename T::Bf16;
  static_assert(B::kNR == T::kNR && B::kNP == T::kNP && T::kKR % B::kKR == 0);
  static_assert(B::kBlockK && kKBlock % T::kKR == 0, "K blocks must match the bf16 kernel's");
  static_assert(std::is_same_v<typename T::A, typename B::A> && std::is_same_v<typename B::W, bf16_t>);
  constexpr int64_t r = T::kKR / B::kKR;  // bf16 k steps per quantized k step
  static_assert(T::kAStep == B::kAStep * r);
  constexpr int64_t kb = kKBlock / T::kKR, bpanel = kb * r * step_w<B>();
  // Per-call scratch of one K block (kNP panels of kKBlock k): the decoded weights live only
  // here, in L1, while the row blocks use them.
  alignas(64) bf16_t buf[T::kNP * bpanel];
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
    if (m > T::kMR) return decoded_gemm<T>(a_packed, m, k, w, p0, p1, c, ldc, accumulate);
  }
  const auto* a = static_cast<const typename T::A*>(a_packed);
  using W = typename T::W;
  const auto* wb = static_cast<const W*>(w);
  const int64_t ks = round_up(k, T::kKR) / T::kKR, lda = T::a_stride(k);
  const int64_t step = step_w<T>(), panel = ks * step;
  // One row block: no K blocking (a decode GEMV streams each panel in one pass, and the
  // hardware prefetcher keeps up with a plain stream), and kNPGemv panels per tile call.
  const int64_t kb = T::kBlockK && m > T::kMR ? kKBlock / T::kKR : ks;
  const int64_t pf = kb < ks ? kb * step * int64_t(sizeof(W)) : 0;
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

// The Ukernel of tile traits T (`name` = the symbol's name, `layout` = the packing family).
template <class T>
constexpr Ukernel make_ukernel(const char* name, const char* layout) {
  if constexpr (T::kFormat == WeightFormat::kBf16) {
    return {name,           layout,         T::kMR,           T::kNR,
            T::kKR,         packed_size<T>, T::pack,          packed_a_size<T>,
            T::pack_a,      blocked_gemm<T>, activation<T>};
  } else {
    return {name,           layout,          T::kMR,           T::kNR,
            T::kKR,         packed_size<T>,  nullptr,          packed_a_size<T>,
            T::pack_a,      blocked_gemm<T>, activation<T>,    T::kFormat,
            T::pack_mxfp4};
  }
}

}  // namespace cpukern::moe
