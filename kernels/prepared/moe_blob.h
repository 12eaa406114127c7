// The serialised form of moe::PackedExperts (kernels/common/prepared_blob.h): op "moe", format
// "bf16" | "mxfp4" | "int8", dims {e, o, i}, one section: the packed experts as prepack wrote
// them. MoE packings cannot be unpacked, so a buffer for a variant this CPU cannot run (or not
// the forced one) is an error: prepack again from the expert weights.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/moe/moe.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {

int64_t serialized_size(const PackedExperts& w);
void serialize(const PackedExperts& w, unsigned char* out, int64_t size);
// O(1) header validation against `size` (InvalidArgument naming `arg`), the checksum when
// verify; the result views the buffer (zero-copy) and holds `owner` until it is destroyed.
// extra_rows: rows besides the registry's (tests: the SIMDe rows).
std::shared_ptr<const PackedExperts> from_buffer(const unsigned char* buf, int64_t size,
                                                 std::shared_ptr<const void> owner, bool verify,
                                                 const std::string& isa, const std::string& arg,
                                                 const std::vector<Variant>* extra_rows = nullptr);

}  // namespace cpukern::moe
