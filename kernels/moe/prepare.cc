// Packing of expert weights, written once for every variant and format: the format and
// activation names, the shape and value checks, and prepare / prepare_mxfp4 / prepare_int8 (for
// the row `isa` names, or an explicit row: the tests' entry points, ukernel.h), each packing
// the experts with the row's micro-kernel for the format (ukernel_for, GemmConfig).
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/common/errors.h"
#include "kernels/common/limits.h"
#include "kernels/common/prepared_blob.h"
#include "kernels/common/thread_pool.h"
#include "kernels/moe/int8.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/mxfp4.h"
#include "kernels/moe/ukernel.h"

namespace cpukern::moe {

Activation parse_activation(const std::string& name) {
  if (name == "silu") return Activation::kSilu;
  if (name == "gelu") return Activation::kGelu;
  if (name == "gelu_tanh") return Activation::kGeluTanh;
  if (name == "swigluoai") return Activation::kSwigluOai;
  throw_arg("activation",
            "expected one of silu, gelu, gelu_tanh, swigluoai, got '" + name + "'");
}

const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kMxfp4: return "mxfp4";
    case WeightFormat::kInt8: return "int8";
    case WeightFormat::kMxfp4A8: return "mxfp4_a8";
    default: return "bf16";
  }
}

WeightFormat parse_format(const std::string& name) {
  if (name == "bf16") return WeightFormat::kBf16;
  if (name == "mxfp4") return WeightFormat::kMxfp4;
  if (name == "int8") return WeightFormat::kInt8;
  if (name == "mxfp4_a8") return WeightFormat::kMxfp4A8;
  throw_arg("format", "expected one of bf16, mxfp4, int8, mxfp4_a8, got '" + name + "'");
}

WeightFormat prepare_format(const std::string& format, const std::string& act, bool has_scales) {
  if (format != "bf16" && format != "mxfp4" && format != "int8")
    throw_arg("format", "expected one of 'bf16', 'mxfp4', 'int8', got '" + format + "'");
  if (act != "fp32" && act != "int8") throw_arg("act", "expected 'fp32' or 'int8', got '" + act + "'");
  if (act == "int8" && format != "mxfp4")
    throw_arg("act", "expected 'fp32' with format='" + format +
                         "' (int8 activations only with format='mxfp4'), got 'int8'");
  if (format == "int8" && !has_scales) throw_arg("scales", "required with format='int8' (float32 (E, O))");
  if (format == "mxfp4" && !has_scales)
    throw_arg("scales", "required with format='mxfp4' (uint8 (E, O, I/32))");
  if (format == "bf16" && has_scales) throw_arg("scales", "only with format='mxfp4' or format='int8'");
  if (format == "mxfp4") return act == "int8" ? WeightFormat::kMxfp4A8 : WeightFormat::kMxfp4;
  return parse_format(format);
}

void check_quantize_k(WeightFormat format, int64_t k, const std::string& got) {
  if (format == WeightFormat::kInt8)
    check_arg(k >= 1, "w", "expected (..., K) with K >= 1, got " + got);
  else
    check_arg(k >= 1 && k % mxfp4::kBlock == 0, "w",
              "expected (..., K) with K a positive multiple of 32, got " + got);
}

// The row a prepare call packs for: an explicit one, or the one `isa` names (resolved only
// after the call's other arguments are checked, so that their errors come first).
// into: pack straight into that serialised buffer (prepare_into).
struct RowChoice {
  const Variant* row;
  const std::string& isa;
  const BlobTarget* into = nullptr;
  const Variant& get() const { return row ? *row : registry().select(isa); }
};

// The e experts of any format packed for the chosen row, one expert per task with the
// format's one pack function: expert x's values and scales lie x * value_bytes and
// x * scale_bytes bytes after those of `first` (the section's overflow check names `arg`).
static std::shared_ptr<const PackedExperts> pack_experts(const RowChoice& choice,
                                                         WeightFormat format, int64_t e,
                                                         int64_t o, int64_t i, const char* arg,
                                                         ExpertWeights first,
                                                         int64_t value_bytes,
                                                         int64_t scale_bytes) {
  auto p = std::make_shared<PackedExperts>();
  p->identify(choice.get(), format, e, o, i);
  const Ukernel& uk = *p->ukernel;
  const int64_t per = uk.packed_size(o, i), bytes = packed_bytes(uk, e, o, i, arg);
  const char* values = static_cast<const char*>(first.values);
  const char* scales = static_cast<const char*>(first.scales);
  if (choice.into) {
    check_disjoint(choice.into->p, choice.into->size, "out",
                   {{values, e * value_bytes, arg}, {scales, scales ? e * scale_bytes : 0, "scales"}});
    p->place_sections(*choice.into, &bytes);
  }
  char* dst = static_cast<char*>(p->own_section(0, bytes));
  parallel_for(e, 0, [&](int64_t x) {
    uk.pack({values + x * value_bytes, scales ? scales + x * scale_bytes : nullptr}, o, i,
            dst + x * per);
  });
  if (choice.into) p->seal({});
  return p;
}

void PackedExperts::identify(const Variant& row, WeightFormat f, int64_t experts,
                             int64_t out_features, int64_t in_features) {
  const Ukernel& uk = ukernel_for(row, f);
  variant = &row;
  ukernel = &uk;
  isa = row.name;
  ukernel_name = uk.name;
  layout_name = uk.layout;
  format = f;
  weight_format = format_name(f);
  act = f == WeightFormat::kInt8 || f == WeightFormat::kMxfp4A8 ? "int8" : "bf16";
  e = experts;
  o = out_features;
  i = in_features;
}

// Every format's experts: e matrices of (o, i), each extent >= 1 (errors name the weights "w",
// the argument of each prepare*, whatever the format's pointer is called); then the format's
// own rules on i and its element counts' overflow, before any array is read.
static void check_weight_shape(WeightFormat format, int64_t e, int64_t o, int64_t i) {
  check_arg(e >= 1 && o >= 1 && i >= 1, "w",
            "expected (E, O, I) experts with E, O, I >= 1, got (" + std::to_string(e) + ", " +
                std::to_string(o) + ", " + std::to_string(i) + ")");
  if (format == WeightFormat::kMxfp4 || format == WeightFormat::kMxfp4A8) {
    check_arg(i % mxfp4::kBlock == 0, "i",
              "MXFP4 in-features must be a positive multiple of 32, got " + std::to_string(i));
    checked_mul(checked_mul(e, o, "blocks"), i / mxfp4::kBlock, "blocks");
    return;
  }
  if (format == WeightFormat::kInt8)
    check_arg(i <= int8::kMaxK, "i",
              "int8 in-features must be in [1, " + std::to_string(int8::kMaxK) +
                  "] (K * 127 * 127 must fit the exact int32 sums), got " + std::to_string(i));
  checked_mul(checked_mul(e, o, "w"), i, "w");
}

int64_t packed_bytes(const Ukernel& uk, int64_t e, int64_t o, int64_t i, const char* arg) {
  return checked_mul(uk.packed_size(o, i), e, arg);
}

int64_t prepared_size(WeightFormat format, int64_t e, int64_t o, int64_t i,
                      const std::string& isa) {
  check_weight_shape(format, e, o, i);
  const int64_t bytes = packed_bytes(ukernel_for(registry().select(isa), format), e, o, i, "w");
  return int64_t(blob::plan(&bytes, 1).total);
}

static std::shared_ptr<const PackedExperts> prepare_mxfp4_for(const uint8_t* blocks,
                                                              const uint8_t* scales, int64_t e,
                                                              int64_t o, int64_t i,
                                                              const RowChoice& isa,
                                                              WeightFormat format) {
  check_arg(format == WeightFormat::kMxfp4 || format == WeightFormat::kMxfp4A8, "format",
            std::string("expected mxfp4 or mxfp4_a8 for MXFP4 blocks, got ") + format_name(format));
  check_weight_shape(format, e, o, i);
  const int64_t nscales = e * o * (i / mxfp4::kBlock);
  check_arg(blocks != nullptr, "blocks", "null pointer");
  check_arg(scales != nullptr, "scales", "null pointer");
  const int64_t bad = mxfp4::first_nan_scale(scales, nscales);
  if (bad >= 0) {
    const int64_t nb = i / mxfp4::kBlock;
    throw_arg("scales", "e8m0 scale 255 (NaN) at expert " + std::to_string(bad / (o * nb)) +
                            ", row " + std::to_string(bad / nb % o) + ", block " +
                            std::to_string(bad % nb) + ": NaN scales are refused");
  }
  return pack_experts(isa, format, e, o, i, "blocks", {blocks, scales}, o * i / 2,
                      o * i / mxfp4::kBlock);
}

static std::shared_ptr<const PackedExperts> prepare_int8_for(const int8_t* q, const float* scales,
                                                             int64_t e, int64_t o, int64_t i,
                                                             const RowChoice& isa) {
  check_weight_shape(WeightFormat::kInt8, e, o, i);
  const int64_t n = e * o * i;
  check_arg(q != nullptr, "w", "null pointer");
  check_arg(scales != nullptr, "scales", "null pointer");
  if (const int64_t at = int8::first_minus_128(q, n); at >= 0)
    throw_arg("w", "int8 weight -128 at expert " + std::to_string(at / (o * i)) + ", row " +
                       std::to_string(at / i % o) + ", column " + std::to_string(at % i) +
                       ": symmetric int8 weights must lie in [-127, 127]");
  if (const int64_t r = int8::first_bad_scale(scales, e * o); r >= 0)
    throw_arg("scales", "scale " + std::to_string(scales[r]) + " at expert " +
                            std::to_string(r / o) + ", row " + std::to_string(r % o) +
                            ": scales must be finite and >= 0");
  return pack_experts(isa, WeightFormat::kInt8, e, o, i, "w", {q, scales}, o * i,
                      o * int64_t(sizeof(float)));
}

static std::shared_ptr<const PackedExperts> prepare_for(const bf16_t* w, int64_t e, int64_t o,
                                                        int64_t i, const RowChoice& isa) {
  check_weight_shape(WeightFormat::kBf16, e, o, i);
  check_arg(w != nullptr, "w", "null pointer");
  return pack_experts(isa, WeightFormat::kBf16, e, o, i, "w", {w},
                      o * i * int64_t(sizeof(bf16_t)), 0);
}

std::shared_ptr<const PackedExperts> prepare(const bf16_t* w, int64_t e, int64_t o, int64_t i,
                                             const std::string& isa, const BlobTarget* into) {
  return prepare_for(w, e, o, i, {nullptr, isa, into});
}
std::shared_ptr<const PackedExperts> prepare(const bf16_t* w, int64_t e, int64_t o, int64_t i,
                                             const Variant& v, const BlobTarget* into) {
  return prepare_for(w, e, o, i, {&v, v.name, into});
}
std::shared_ptr<const PackedExperts> prepare_mxfp4(const uint8_t* blocks, const uint8_t* scales,
                                                   int64_t e, int64_t o, int64_t i,
                                                   const std::string& isa, WeightFormat format,
                                                   const BlobTarget* into) {
  return prepare_mxfp4_for(blocks, scales, e, o, i, {nullptr, isa, into}, format);
}
std::shared_ptr<const PackedExperts> prepare_mxfp4(const uint8_t* blocks, const uint8_t* scales,
                                                   int64_t e, int64_t o, int64_t i,
                                                   const Variant& v, WeightFormat format,
                                                   const BlobTarget* into) {
  return prepare_mxfp4_for(blocks, scales, e, o, i, {&v, v.name, into}, format);
}
std::shared_ptr<const PackedExperts> prepare_int8(const int8_t* q, const float* scales, int64_t e,
                                                  int64_t o, int64_t i, const std::string& isa,
                                                  const BlobTarget* into) {
  return prepare_int8_for(q, scales, e, o, i, {nullptr, isa, into});
}
std::shared_ptr<const PackedExperts> prepare_int8(const int8_t* q, const float* scales, int64_t e,
                                                  int64_t o, int64_t i, const Variant& v,
                                                  const BlobTarget* into) {
  return prepare_int8_for(q, scales, e, o, i, {&v, v.name, into});
}

}  // namespace cpukern::moe
