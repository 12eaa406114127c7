// Decode attention, f32 keys and values, 8-float vectors (decode_chunk.h).
#include "kernels/attention/ukernels/decode_chunk.h"
#include "kernels/attention/ukernels/ukernels.h"

namespace cpukern::attention {

void attention_decode_f32_f32_g4__avx2(const Chunk& c) { decode_chunk<8, float>(c); }

}  // namespace cpukern::attention
