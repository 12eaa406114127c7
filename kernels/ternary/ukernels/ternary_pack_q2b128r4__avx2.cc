// Packer of the q2b128r4 layout with AVX2 (pack_q2b_avx2.h; int8 micro-kernels only: no unpack).
#include "kernels/ternary/ukernels/pack_q2b_avx2.h"

namespace cpukern::ternary {

const Packer ternary_pack_q2b128r4__avx2 = {"ternary_pack_q2b128r4__avx2", q2b_avx2::pack<128, 4>, nullptr};

}  // namespace cpukern::ternary
