// Decode attention, bf16 keys and values, 16-float vectors (decode_chunk.h).
#include "kernels/attention/ukernels/decode_chunk.h"
#include "kernels/attention/ukernels/ukernels.h"

namespace cpukern::attention {

void attention_decode_f32_bf16_g4__avx512f(const Chunk& c) { decode_chunk<16, uint16_t>(c); }

}  // namespace cpukern::attention
