// fp32 ternary GEMV, lut4r16 layout, 16-row tiles, NEON (ARMv8.0; packer:
// ternary_pack_lut4r16__scalar).
//
// Multiplication-free table lookup with lanes = rows. Per group of 4 columns the activations'
// 16 subset sums T[s] = sum_{c in s} x_c are stored by xprep as 4 byte planes (plane b = byte
// b of T[0..15], one q register each). A tile stores one byte per row and group: the add
// pattern in the low nibble, the subtract pattern in the high nibble. Four `tbl` (vqtbl1q_u8)
// look a nibble vector up in the 4 planes, giving byte b of T[p_i] for the tile's 16 rows;
// two levels of zips reassemble the bytes into 4 float vectors (rows 0-3 .. 12-15):
// acc = (acc + T[p]) - T[n]. Per 64 weights: 1 load, 2 nibble splits, 8 tbl, 16 zip, 8 fp
// add/sub, all 1-uop ASIMD ops, against 4-lane masked add/sub's ~2 ops per weight.
// The sum over k is cut into chunks of kChunk groups; each chunk's sum is added to y, so per
// row the order of additions depends on k only (any thread count gives the same bits).
#include <arm_neon.h>

#include <algorithm>

#include "kernels/ternary/ukernels/layouts.h"
#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

constexpr int64_t kR = layouts::kLut4r16Rows;
constexpr int64_t kChunk = 256;  // groups of 4 columns per chunk (1024 columns)

F32Geometry geometry(int64_t m, int64_t k) {
  F32Geometry g;
  g.p0 = layouts::lut4r16_groups(k);
  g.p1 = k;
  g.tile_bytes = g.p0 * kR;
  g.x_bytes = g.p0 * 64;
  return g;
}

int64_t packed_size(int64_t m, int64_t k) { return (m + kR - 1) / kR * geometry(m, k).tile_bytes; }

// The 16 subset sums of (x0, x1, x2, x3) as 4 byte planes.
inline void store_planes(float32x4_t x, uint8_t* dst) {
  // t0 = {0, x0, x1, x0 + x1}; entries 4-7 add x2, 8-11 add x3, 12-15 add both.
  const float32x4_t zx = vextq_f32(vdupq_n_f32(0.0f), x, 3);             // {0, x0, x1, x2}
  const float32x4_t x1 = vdupq_laneq_f32(x, 1);
  const float32x4_t t0 = vcopyq_laneq_f32(zx, 3, vaddq_f32(x, x1), 0);  // {0, x0, x1, x0+x1}
  const float32x4_t t1 = vaddq_f32(t0, vdupq_laneq_f32(x, 2));
  const float32x4_t t2 = vaddq_f32(t0, vdupq_laneq_f32(x, 3));
  const float32x4_t t3 = vaddq_f32(t1, vdupq_laneq_f32(x, 3));
  const uint8x16_t a = vreinterpretq_u8_f32(t0), b = vreinterpretq_u8_f32(t1);
  const uint8x16_t c = vreinterpretq_u8_f32(t2), d = vreinterpretq_u8_f32(t3);
  const uint8x16_t e02 = vuzp1q_u8(a, b), e13 = vuzp2q_u8(a, b);  // bytes {0,2} / {1,3}, T0-7
  const uint8x16_t f02 = vuzp1q_u8(c, d), f13 = vuzp2q_u8(c, d);  // T8-15
  vst1q_u8(dst, vuzp1q_u8(e02, f02));
  vst1q_u8(dst + 16, vuzp1q_u8(e13, f13));
  vst1q_u8(dst + 32, vuzp2q_u8(e02, f02));
  vst1q_u8(dst + 48, vuzp2q_u8(e13, f13));
}

void ternary_gemv_f32_f32_lut4r16_16x1__neon_xprep(const float* x, const F32Geometry* geo, void* dst) {
  uint8_t* t = static_cast<uint8_t*>(dst);
  const int64_t k = geo->p1;
  const uint8_t* end = t + geo->x_bytes;
  int64_t j = 0;
  for (; j + 3 < k; j += 4, t += 64) store_planes(vld1q_f32(x + j), t);
  for (; t < end; j += 4, t += 64) {
    float v[4];
    for (int c = 0; c < 4; ++c) v[c] = j + c < k ? x[j + c] : 0.0f;
    store_planes(vld1q_f32(v), t);
  }
}

// Looks the 16 nibbles of `idx` up: the floats T[idx[i]] for i = 0..15 in out[i / 4].
__attribute__((always_inline)) inline void lookup(const uint8x16_t p[4], uint8x16_t idx,
                                                  float32x4_t out[4]) {
  const uint8x16_t b0 = vqtbl1q_u8(p[0], idx), b1 = vqtbl1q_u8(p[1], idx);
  const uint8x16_t b2 = vqtbl1q_u8(p[2], idx), b3 = vqtbl1q_u8(p[3], idx);
  const uint16x8_t l0 = vreinterpretq_u16_u8(vzip1q_u8(b0, b1));
  const uint16x8_t l1 = vreinterpretq_u16_u8(vzip2q_u8(b0, b1));
  const uint16x8_t h0 = vreinterpretq_u16_u8(vzip1q_u8(b2, b3));
  const uint16x8_t h1 = vreinterpretq_u16_u8(vzip2q_u8(b2, b3));
  out[0] = vreinterpretq_f32_u16(vzip1q_u16(l0, h0));
  out[1] = vreinterpretq_f32_u16(vzip2q_u16(l0, h0));
  out[2] = vreinterpretq_f32_u16(vzip1q_u16(l1, h1));
  out[3] = vreinterpretq_f32_u16(vzip2q_u16(l1, h1));
}

inline void store_rows(float* y, float32x4_t d, int64_t valid, bool first) {
  if (valid >= 4) {
    if (!first) d = vaddq_f32(d, vld1q_f32(y));
    vst1q_f32(y, d);
    return;
  }
  float tmp[4];
  vst1q_f32(tmp, d);
  for (int64_t i = 0; i < valid; ++i) y[i] = first ? tmp[i] : y[i] + tmp[i];
}

// NT tiles (16 rows each) over groups [0, ngroups) of one chunk, one batch row.
template <int NT>
__attribute__((always_inline)) inline void chunk_kernel(const uint8_t* w, int64_t tile_bytes,
                                                        const uint8_t* tab, int64_t ngroups,
                                                        float* y, int64_t valid, bool first) {
  float32x4_t acc[NT][4];
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < 4; ++i) acc[t][i] = vdupq_n_f32(0.0f);
  const uint8_t* wt[NT];
  wt[0] = w;
  for (int t = 1; t < NT; ++t) wt[t] = wt[t - 1] + tile_bytes;
  const uint8x16_t lo = vdupq_n_u8(0x0F);
  for (int64_t g = 0; g < ngroups; ++g, tab += 64) {
    const uint8x16_t p[4] = {vld1q_u8(tab), vld1q_u8(tab + 16), vld1q_u8(tab + 32),
                             vld1q_u8(tab + 48)};
    for (int t = 0; t < NT; ++t) {
      const uint8x16_t v = vld1q_u8(wt[t]);
      wt[t] += kR;
      float32x4_t add[4], sub[4];
      lookup(p, vandq_u8(v, lo), add);
      lookup(p, vshrq_n_u8(v, 4), sub);
      for (int i = 0; i < 4; ++i) acc[t][i] = vsubq_f32(vaddq_f32(acc[t][i], add[i]), sub[i]);
    }
  }
  for (int t = 0; t < NT; ++t, y += kR, valid -= kR)
    for (int i = 0; i < 4; ++i) store_rows(y + 4 * i, acc[t][i], valid - 4 * i, first);
}

// Tile groups outer (each task streams its weights), chunks, then batch rows inner (the
// chunk's weights stay in L1 across batch rows; its table is 16 KiB per batch row).
template <int NT>
__attribute__((always_inline)) inline void tiles_outer(const F32Args* a) {
  const int64_t ngroups_all = a->geo->p0;
  const int64_t tile_bytes = a->geo->tile_bytes;
  const int64_t x_bytes = a->geo->x_bytes;
  const uint8_t* w = static_cast<const uint8_t*>(a->w);
  float* y = a->y;
  for (int64_t left = a->rows; left > 0; left -= kR * NT, w += NT * tile_bytes, y += kR * NT) {
    const uint8_t* wc = w;
    const uint8_t* tc = static_cast<const uint8_t*>(a->xp);
    for (int64_t g0 = 0; g0 < ngroups_all; g0 += kChunk, wc += kChunk * kR, tc += kChunk * 64) {
      const int64_t n = std::min(kChunk, ngroups_all - g0);
      const bool first = g0 == 0;
      const uint8_t* tb = tc;
      float* yb = y;
      for (int64_t b = a->batch; b > 0; --b, tb += x_bytes, yb += a->ldy) {
        // The last group may hold fewer than NT tiles: never read past the range's tiles.
        if (left > kR * (NT - 1)) {
          chunk_kernel<NT>(wc, tile_bytes, tb, n, yb, left, first);
        } else {
          chunk_kernel<1>(wc, tile_bytes, tb, n, yb, left, first);
        }
      }
    }
  }
}

void ternary_gemv_f32_f32_lut4r16_16x1__neon_run(const F32Args* a) { tiles_outer<2>(a); }

}  // namespace

const F32Ukernel ternary_gemv_f32_f32_lut4r16_16x1__neon = {
    "ternary_gemv_f32_f32_lut4r16_16x1__neon", "lut4r16", 16, geometry, packed_size,
    ternary_gemv_f32_f32_lut4r16_16x1__neon_xprep, ternary_gemv_f32_f32_lut4r16_16x1__neon_run};

}  // namespace cpukern::ternary
