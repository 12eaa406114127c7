// Decode attention, bf16 keys and values, 4-float vectors (decode_chunk.h).
#include "kernels/attention/ukernels/decode_chunk.h"
#include "kernels/attention/ukernels/ukernels.h"

namespace cpukern::attention {

void attention_decode_f32_bf16_g4__neon(const Chunk& c) { decode_chunk<4, uint16_t>(c); }

}  // namespace cpukern::attention
