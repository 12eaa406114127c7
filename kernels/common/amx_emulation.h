// The Intel AMX tile intrinsics cpukern uses, over an emulated per-thread tile file, so that
// the AMX micro-kernels build and run on any host (tests; SIMDe and qemu-user have no AMX).
// A file compiled with CPUKERN_AMX_EMULATION includes this instead of using the instructions;
// the same source compiled with -mamx-* runs them natively.
//
// Semantics follow the Intel SDM (vol. 2, TILELOADD, TILESTORED, TILEZERO, LDTILECFG,
// TDPBF16PS, TDPB[SU]{SU}D):
// - LDTILECFG: palette 1 = 8 tiles of at most 16 rows x 64 bytes; zeroes every tile; palette 0
//   is the INIT state (as TILERELEASE). A bad config or a tile used outside its configured
//   shape is a fault there: a trap here.
// - TILELOADD reads `rows` rows of `colsb` bytes; the rest of the tile becomes zero.
// - TDPBF16PS, per C row m and column n: two fp32 sums over the k pairs, one of the even
//   elements' products and one of the odd ones', each step one FMA (round to nearest even),
//   then C += (even + odd). Inputs that are bf16 or fp32 denormals count as zero (DAZ) and
//   denormal results become zero of the same sign (FTZ), whatever MXCSR says.
// - TDPBSSD / TDPBSUD / TDPBUSD / TDPBUUD: C (int32) += the four byte products of each quad,
//   signed or unsigned per operand, exact, wrapping modulo 2**32.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>  // first: the macros below replace its AMX names
#endif

namespace cpukern::amx_emulation {

struct TileFile {
  bool configured = false;
  uint16_t colsb[8] = {};
  uint8_t rows[8] = {};
  alignas(64) uint8_t data[8][16][64] = {};
};

inline TileFile& tile_file() {
  static thread_local TileFile f;
  return f;
}

// A fault on hardware (#GP / #UD).
[[noreturn]] inline void fault() { __builtin_trap(); }

inline void release() { tile_file() = TileFile(); }

inline void loadconfig(const void* config) {
  const auto* c = static_cast<const uint8_t*>(config);
  TileFile& f = tile_file();
  f = TileFile();
  if (c[0] == 0) return;  // palette 0: INIT
  if (c[0] != 1 || c[1] != 0) fault();
  for (int t = 0; t < 8; ++t) {
    f.colsb[t] = uint16_t(c[16 + 2 * t] | c[17 + 2 * t] << 8);
    f.rows[t] = c[48 + t];
    if (f.colsb[t] > 64 || f.rows[t] > 16 || (f.colsb[t] == 0) != (f.rows[t] == 0)) fault();
  }
  f.configured = true;
}

inline void storeconfig(void* config) {
  const TileFile& f = tile_file();
  auto* c = static_cast<uint8_t*>(config);
  std::memset(c, 0, 64);
  if (!f.configured) return;
  c[0] = 1;
  for (int t = 0; t < 8; ++t) {
    c[16 + 2 * t] = uint8_t(f.colsb[t]);
    c[17 + 2 * t] = uint8_t(f.colsb[t] >> 8);
    c[48 + t] = f.rows[t];
  }
}

inline TileFile& configured(int t) {
  TileFile& f = tile_file();
  if (!f.configured || t < 0 || t > 7 || f.rows[t] == 0) fault();
  return f;
}

inline void loadd(int t, const void* base, int64_t stride) {
  TileFile& f = configured(t);
  std::memset(f.data[t], 0, sizeof(f.data[t]));
  for (int r = 0; r < f.rows[t]; ++r)
    std::memcpy(f.data[t][r], static_cast<const char*>(base) + r * stride, f.colsb[t]);
}

inline void stored(int t, void* base, int64_t stride) {
  const TileFile& f = configured(t);
  for (int r = 0; r < f.rows[t]; ++r)
    std::memcpy(static_cast<char*>(base) + r * stride, f.data[t][r], f.colsb[t]);
}

inline void zero(int t) { std::memset(configured(t).data[t], 0, 1024); }

inline float flush_denormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}
inline float bf16_daz(const uint8_t* p) {
  const uint32_t bits = uint32_t(p[0] | p[1] << 8) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  return flush_denormal(x);
}

// The shapes the instructions require (else #UD): C rows = A rows, C bytes per row = B bytes
// per row, A's 4-byte columns = B's rows.
inline TileFile& product_shapes(int c, int a, int b) {
  TileFile& f = configured(c);
  configured(a), configured(b);
  if (f.rows[c] != f.rows[a] || f.colsb[c] != f.colsb[b] || f.colsb[a] / 4 != f.rows[b] ||
      f.colsb[c] % 4 || f.colsb[a] % 4)
    fault();
  return f;
}

inline void dpbf16ps(int c, int a, int b) {
  TileFile& f = product_shapes(c, a, b);
  const int nk = f.colsb[a] / 4, nn = f.colsb[c] / 4;
  for (int m = 0; m < f.rows[c]; ++m) {
    float even[16] = {}, odd[16] = {};
    for (int k = 0; k < nk; ++k)
      for (int n = 0; n < nn; ++n) {
        const uint8_t* x = f.data[a][m] + 4 * k;
        const uint8_t* y = f.data[b][k] + 4 * n;
        even[n] = flush_denormal(std::fma(bf16_daz(x), bf16_daz(y), even[n]));
        odd[n] = flush_denormal(std::fma(bf16_daz(x + 2), bf16_daz(y + 2), odd[n]));
      }
    for (int n = 0; n < nn; ++n) {
      float acc;
      std::memcpy(&acc, f.data[c][m] + 4 * n, 4);
      acc = flush_denormal(flush_denormal(acc) + flush_denormal(even[n] + odd[n]));
      std::memcpy(f.data[c][m] + 4 * n, &acc, 4);
    }
  }
}

// C (int32) += quads of A (signed if SA) x quads of B (signed if SB), wrapping.
template <bool SA, bool SB>
void dpb_d(int c, int a, int b) {
  TileFile& f = product_shapes(c, a, b);
  const int nk = f.colsb[a] / 4, nn = f.colsb[c] / 4;
  auto byte = [](uint8_t v, bool s) { return s ? int32_t(int8_t(v)) : int32_t(v); };
  for (int m = 0; m < f.rows[c]; ++m)
    for (int n = 0; n < nn; ++n) {
      uint32_t acc;
      std::memcpy(&acc, f.data[c][m] + 4 * n, 4);
      for (int k = 0; k < nk; ++k)
        for (int i = 0; i < 4; ++i)
          acc += uint32_t(byte(f.data[a][m][4 * k + i], SA) * byte(f.data[b][k][4 * n + i], SB));
      std::memcpy(f.data[c][m] + 4 * n, &acc, 4);
    }
}

}  // namespace cpukern::amx_emulation

#undef _tile_loadd
#undef _tile_stream_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#undef _tile_dpbssd
#undef _tile_dpbsud
#undef _tile_dpbusd
#undef _tile_dpbuud
#define _tile_loadconfig(config) ::cpukern::amx_emulation::loadconfig(config)
#define _tile_storeconfig(config) ::cpukern::amx_emulation::storeconfig(config)
#define _tile_release() ::cpukern::amx_emulation::release()
#define _tile_loadd(t, base, stride) ::cpukern::amx_emulation::loadd(t, base, stride)
#define _tile_stream_loadd(t, base, stride) ::cpukern::amx_emulation::loadd(t, base, stride)
#define _tile_stored(t, base, stride) ::cpukern::amx_emulation::stored(t, base, stride)
#define _tile_zero(t) ::cpukern::amx_emulation::zero(t)
#define _tile_dpbf16ps(c, a, b) ::cpukern::amx_emulation::dpbf16ps(c, a, b)
#define _tile_dpbssd(c, a, b) ::cpukern::amx_emulation::dpb_d<true, true>(c, a, b)
#define _tile_dpbsud(c, a, b) ::cpukern::amx_emulation::dpb_d<true, false>(c, a, b)
#define _tile_dpbusd(c, a, b) ::cpukern::amx_emulation::dpb_d<false, true>(c, a, b)
#define _tile_dpbuud(c, a, b) ::cpukern::amx_emulation::dpb_d<false, false>(c, a, b)
