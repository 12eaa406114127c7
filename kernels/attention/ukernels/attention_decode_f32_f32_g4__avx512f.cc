// Decode attention, f32 keys and values, 16-float vectors (decode_chunk.h).
#include "kernels/attention/ukernels/decode_chunk.h"
#include "kernels/attention/ukernels/ukernels.h"

namespace cpukern::attention {

void attention_decode_f32_f32_g4__avx512f(const Chunk& c) { decode_chunk<16, float>(c); }

}  // namespace cpukern::attention
