// Decode attention, f32 keys and values, 4-float vectors (decode_chunk.h).
#include "kernels/attention/ukernels/decode_chunk.h"
#include "kernels/attention/ukernels/ukernels.h"

namespace cpukern::attention {

void attention_decode_f32_f32_g4__neon(const Chunk& c) { decode_chunk<4, float>(c); }

}  // namespace cpukern::attention
