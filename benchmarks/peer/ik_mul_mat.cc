// Times ik_llama.cpp's own matrix multiplication kernel alone: one ggml_mul_mat(weight, x)
// graph computed on its CPU backend, the weight repacked first with iqk_repack_tensor (what
// ik's `-rtr 1` does at load). Compiled at run time by benchmarks/peer/ik_peer.py against the
// user's ik_llama.cpp build (nothing of ik_llama.cpp is vendored or built by Bazel).
//
//   ik_mul_mat --type bf16|iq2_bn|mxfp4|q8_0 --m M --k K --t 1,2,4,8 --threads 1,2
//              [--cold-bytes N] [--min-time S] [--no-repack] [--seed S]
//
// Prints one JSON line per (threads, T): seconds per call (median of single calls) and the
// bytes of weights one call reads. Cold: enough weight copies that together they exceed
// --cold-bytes (the caller passes 3x the L3), one graph per copy, rotated call by call.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ggml.h"
#include "ggml-backend.h"
#include "iqk/iqk_quantize.h"

namespace {

struct Options {
  std::string type = "bf16";
  int64_t rows = 0;     // M: output features
  int64_t columns = 0;  // K: input features
  std::vector<int> tokens = {1};
  std::vector<int> thread_counts = {1};
  double cold_bytes = 0;  // 0: one copy (hot)
  double min_time = 0.3;
  bool repack = true;
  uint64_t seed = 0;
};

std::vector<int> parse_list(const char* text) {
  std::vector<int> out;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    out.push_back(static_cast<int>(std::strtol(p, &end, 10)));
    if (end == p) break;
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "ik_mul_mat: %s\n", message.c_str());
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) fail("missing value after " + arg);
      return argv[++i];
    };
    if (arg == "--type") o.type = value();
    else if (arg == "--m") o.rows = std::atoll(value());
    else if (arg == "--k") o.columns = std::atoll(value());
    else if (arg == "--t") o.tokens = parse_list(value());
    else if (arg == "--threads") o.thread_counts = parse_list(value());
    else if (arg == "--cold-bytes") o.cold_bytes = std::atof(value());
    else if (arg == "--min-time") o.min_time = std::atof(value());
    else if (arg == "--seed") o.seed = std::strtoull(value(), nullptr, 10);
    else if (arg == "--no-repack") o.repack = false;
    else fail("unknown argument " + arg);
  }
  if (o.rows <= 0 || o.columns <= 0) fail("--m and --k are required");
  return o;
}

ggml_type weight_type(const std::string& name) {
  if (name == "bf16") return GGML_TYPE_BF16;
  if (name == "iq2_bn") return GGML_TYPE_IQ2_BN;
  if (name == "mxfp4") return GGML_TYPE_MXFP4;
  if (name == "q8_0") return GGML_TYPE_Q8_0;
  fail("unknown --type " + name + " (bf16, iq2_bn, mxfp4, q8_0)");
}

// Random weights as floats: ternary {-1, 0, +1} for IQ2_BN (a BitNet layer; its quantizer
// keeps them exact), Gaussian / sqrt(K) otherwise.
std::vector<float> random_weights(const Options& o, std::mt19937_64& rng) {
  std::vector<float> w(static_cast<size_t>(o.rows * o.columns));
  if (o.type == "iq2_bn") {
    std::uniform_int_distribution<int> trit(-1, 1);
    for (auto& v : w) v = static_cast<float>(trit(rng));
  } else {
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(o.columns)));
    for (auto& v : w) v = normal(rng);
  }
  return w;
}

struct Copy {
  ggml_tensor* weight = nullptr;
  std::vector<ggml_cgraph*> graph_per_t;  // one graph of one mul_mat per entry of --t
};

// Median seconds of single calls, cycling through the copies; at least 5 calls and a full
// rotation, and at least min_time in all.
double time_calls(std::vector<Copy>& copies, size_t t_index, ggml_backend_t backend,
                  double min_time) {
  using clock = std::chrono::steady_clock;
  for (auto& c : copies) ggml_backend_graph_compute(backend, c.graph_per_t[t_index]);  // warm-up
  std::vector<double> seconds;
  const auto start = clock::now();
  for (size_t n = 0;; ++n) {
    const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
    if (elapsed >= min_time && seconds.size() >= std::max<size_t>(5, copies.size())) break;
    const auto t0 = clock::now();
    ggml_backend_graph_compute(backend, copies[n % copies.size()].graph_per_t[t_index]);
    seconds.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  const ggml_type source_type = weight_type(o.type);
  std::mt19937_64 rng(o.seed);

  const size_t weight_bytes = ggml_row_size(source_type, o.columns) * o.rows;
  int max_t = *std::max_element(o.tokens.begin(), o.tokens.end());
  const size_t per_copy_extra =
      o.tokens.size() * (ggml_graph_overhead() + 3 * ggml_tensor_overhead() +
                         static_cast<size_t>(max_t) * (o.columns + o.rows) * sizeof(float) + 256) +
      ggml_tensor_overhead() + 256;
  const int num_copies =
      std::max(1, static_cast<int>(std::ceil(o.cold_bytes / static_cast<double>(weight_bytes))));

  // One context for all copies: ggml allows only a few dozen contexts per process.
  ggml_init_params params = {num_copies * (weight_bytes + per_copy_extra), nullptr, false};
  ggml_context* context = ggml_init(params);
  if (!context) fail("ggml_init failed (out of memory?)");
  std::vector<Copy> copies(num_copies);
  for (auto& c : copies) {
    c.weight = ggml_new_tensor_2d(context, source_type, o.columns, o.rows);
    ggml_set_name(c.weight, "blk.0.ffn_up.weight");  // not a name iqk_repack_tensor skips
  }
  // Copy 0: ggml's own quantizer from random floats, then ik's repack in place (a no-op where
  // ik has no row-interleaved form: the JSON's kernel_type says which ran); the other copies
  // are byte copies. The first rows' floats stay for the check below.
  const int64_t checked_rows = std::min<int64_t>(o.rows, 64);
  std::vector<float> checked_floats;
  {
    const std::vector<float> floats = random_weights(o, rng);
    ggml_quantize_chunk(source_type, floats.data(), copies[0].weight->data, 0, o.rows, o.columns,
                        nullptr, nullptr);
    checked_floats.assign(floats.begin(), floats.begin() + checked_rows * o.columns);
  }
  if (o.repack) iqk_repack_tensor(copies[0].weight);
  const ggml_type kernel_type = copies[0].weight->type;
  for (int c = 1; c < num_copies; ++c) {
    copies[c].weight->type = kernel_type;
    std::memcpy(copies[c].weight->data, copies[0].weight->data, weight_bytes);
  }

  // One graph per (copy, T): y = weight x, x random floats (ggml quantizes x itself where the
  // kernel wants int8 activations, inside the timed call, as in a model).
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& c : copies) {
    for (int t : o.tokens) {
      ggml_tensor* x = ggml_new_tensor_2d(context, GGML_TYPE_F32, o.columns, t);
      auto* xd = static_cast<float*>(x->data);
      for (int64_t i = 0; i < o.columns * t; ++i) xd[i] = normal(rng);
      ggml_tensor* y = ggml_mul_mat(context, c.weight, x);
      ggml_cgraph* graph = ggml_new_graph(context);
      ggml_build_forward_expand(graph, y);
      c.graph_per_t.push_back(graph);
    }
  }

  ggml_backend_t backend = ggml_backend_cpu_init();
  if (!backend) fail("ggml_backend_cpu_init failed");

  // A check that the repacked kernel computes this product: copy 0's first token against the
  // float weights before quantization, the largest error as a fraction of sum_k |w x| (the
  // format's own rounding: under 1e-3 for bf16 and IQ2_BN, about 1e-2 for MXFP4).
  double check_error = 0;
  {
    ggml_cgraph* graph = copies[0].graph_per_t[0];
    ggml_backend_graph_compute(backend, graph);
    const ggml_tensor* y = ggml_graph_node(graph, -1);
    const auto* x = static_cast<const float*>(y->src[1]->data);
    const auto* yd = static_cast<const float*>(y->data);
    for (int64_t row = 0; row < checked_rows; ++row) {
      double dot = 0, magnitude = 0;
      for (int64_t i = 0; i < o.columns; ++i) {
        const double p = static_cast<double>(checked_floats[row * o.columns + i]) * x[i];
        dot += p;
        magnitude += std::fabs(p);
      }
      check_error = std::max(check_error, std::fabs(yd[row] - dot) / std::max(magnitude, 1e-30));
    }
  }
  for (int threads : o.thread_counts) {
    ggml_backend_cpu_set_n_threads(backend, threads);
    for (size_t i = 0; i < o.tokens.size(); ++i) {
      const double seconds = time_calls(copies, i, backend, o.min_time);
      std::printf(
          "{\"type\": \"%s\", \"kernel_type\": \"%s\", \"repacked\": %s, \"m\": %lld, \"k\": %lld, "
          "\"t\": %d, \"threads\": %d, \"copies\": %d, \"weight_bytes\": %zu, "
          "\"seconds_per_call\": %.9g, \"check_error\": %.3g}\n",
          o.type.c_str(), ggml_type_name(kernel_type), kernel_type != source_type ? "true" : "false",
          static_cast<long long>(o.rows), static_cast<long long>(o.columns), o.tokens[i], threads,
          num_copies, ggml_nbytes(copies[0].weight), seconds, check_error);
      std::fflush(stdout);
    }
  }
  ggml_backend_free(backend);
  ggml_free(context);
  return 0;
}
