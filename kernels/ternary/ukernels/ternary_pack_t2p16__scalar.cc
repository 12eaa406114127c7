// Packer of the t2p16 layout (the public format itself): a copy.
#include <cstring>

#include "kernels/ternary/ukernels/ukernels.h"

namespace cpukern::ternary {
namespace {

void copy_words(const void* src, int64_t m, int64_t k, void* dst) {
  std::memcpy(dst, src, size_t(m * words_for(k) * 4));
}
void pack(const uint32_t* packed, int64_t m, int64_t k, void* dst) {
  copy_words(packed, m, k, dst);
}
void unpack(const void* src, int64_t m, int64_t k, uint32_t* packed) {
  copy_words(src, m, k, packed);
}

}  // namespace

const Packer ternary_pack_t2p16__scalar = {"ternary_pack_t2p16__scalar", pack, unpack};

}  // namespace cpukern::ternary
