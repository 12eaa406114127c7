// Portable scalar MXFP4 micro-kernel, the oracle of the MXFP4 tiles: per output column its
// K/32 blocks as stored [scale][16 bytes of e2m1] (17 bytes per 32 weights), each weight
// decoded to its exact fp32 value (mxfp4::value) and summed exactly as the bf16 scalar kernel
// sums the dequantized weights (multiply, then add, sequential in k).
#include <cstring>

#include "kernels/moe/gemm_loop.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernels/pack_kpairs.h"
#include "kernels/moe/ukernels/ukernels.h"

namespace cpukern::moe {
namespace {

constexpr int kStep = 1 + mxfp4::kBlockBytes;

void pack(const uint8_t* blocks, const uint8_t* scales, int64_t o, int64_t i, void* dst) {
  const int64_t nb = i / mxfp4::kBlock;
  uint8_t* d = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < o * nb; ++r) {
    d[r * kStep] = scales[r];
    std::memcpy(d + r * kStep + 1, blocks + r * mxfp4::kBlockBytes, mxfp4::kBlockBytes);
  }
}

struct Tile : TileDefaults {
  static constexpr int kMR = 1, kNR = 1, kKR = mxfp4::kBlock, kNP = 4, kAStep = mxfp4::kBlock;
  static constexpr int kActW = 4, kStepW = kStep;
  static constexpr WeightFormat kFormat = WeightFormat::kMxfp4;
  using A = float;
  using W = uint8_t;
  static int64_t a_stride(int64_t k) { return k; }
  static int64_t rows(int64_t) { return 1; }
  static constexpr auto pack_mxfp4 = moe::pack;
  static constexpr auto pack_a = pack_a_f32<1>;
  template <int M>
  static void tile(const float* a, int64_t, int64_t nb, const uint8_t* w, int64_t panel, int np,
                   float* c, int64_t, bool accumulate, int64_t) {
    if (np == 4) return columns<4>(a, nb, w, panel, c, accumulate);
    for (int j = 0; j < np; ++j) columns<1>(a, nb, w + j * panel, panel, c + j, accumulate);
  }
  template <int N>
  static void columns(const float* a, int64_t nb, const uint8_t* w, int64_t panel, float* c,
                      bool accumulate) {
    float s[N] = {};
    for (int64_t b = 0; b < nb; ++b)
      for (int q = 0; q < mxfp4::kBlock; ++q)
        for (int j = 0; j < N; ++j) {
          const uint8_t* blk = w + j * panel + b * kStep;
          s[j] += a[b * mxfp4::kBlock + q] * mxfp4::value(mxfp4::code_at(blk + 1, q), blk[0]);
        }
    for (int j = 0; j < N; ++j) c[j] = accumulate ? c[j] + s[j] : s[j];
  }
};

}  // namespace

const Ukernel moe_gemm_f32_f32_mxfp4_1x1__scalar =
    make_ukernel<Tile>("moe_gemm_f32_f32_mxfp4_1x1__scalar", "mxfp4");

}  // namespace cpukern::moe
