// The arithmetic behind `accelerate estimate-memory`, kept apart from the
// command line so tests can check every number. Torch-free.
//
// The figures follow Hugging Face Accelerate's estimator so that a user gets
// the same answer from either tool: sizes are computed for the model held in
// float32 and divided for smaller dtypes, and "training using Adam" is the
// largest of the phases of one step at batch size 1 (weights, gradients,
// optimizer states, the step itself), no activations.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accelerate::cli {

// The dtypes --dtypes accepts, in table order (also the default).
const std::vector<std::string>& known_estimate_dtypes();

// "7B", "350M", "1.5k", "1.3e9", "125000000" -> a parameter count.
// Suffixes K, M, B (or G), T, either case. nullopt for anything else,
// including zero, negative, non-finite and fractional-parameter counts.
std::optional<uint64_t> parse_parameter_count(const std::string& text);

// What the estimate needs to know about a model.
struct ModelSize {
  uint64_t parameters = 0;   // elements over every tensor
  uint64_t total_bytes = 0;  // in float32 (floating tensors at 4 bytes each)
  // The largest layer (tensors sharing a name up to the last '.'), in the
  // same float32 terms; unknown for a bare parameter count.
  std::optional<uint64_t> largest_layer_bytes;
  std::string largest_layer_name;
};

ModelSize model_size_from_count(uint64_t parameters);

// Reads safetensors headers only (no tensor data): a .safetensors file, a
// model.safetensors.index.json naming shards, or a directory holding either
// (or just *.safetensors shards). Throws accelerate::ConfigError with one
// line naming the file and the problem.
ModelSize model_size_from_path(const std::string& path);

// Accelerate's per-phase training memory for `fp32_bytes` of weights under
// `dtype`; nullopt where it has no estimate (int8, int4).
std::optional<uint64_t> training_bytes_with_adam(uint64_t fp32_bytes, const std::string& dtype);

// One row of the table, in bytes.
struct EstimateRow {
  std::string dtype;
  std::optional<double> largest_layer;
  double total = 0;
  std::optional<double> training;
  bool integral = false;  // float32 sizes stay whole numbers (formatting)
};

std::vector<EstimateRow> estimate_rows(const ModelSize& size,
                                       const std::vector<std::string>& dtypes);

// One row of the ZeRO table: the bytes of model state (parameters,
// gradients, Adam's two moments) that each of `processes` holds, for a model
// of P parameters in a dtype of b bytes each. The library's ZeRO keeps all
// of it in the weights' dtype (Adam's moments are zeros_like(param)), so with
// W = Pb, the dtype's size from the table above (float32 size, halved for
// float16/bfloat16): stage 0 (data parallel) 4W, stage 1 (Adam's states
// sharded) 2W + 2W/N, stage 2 (gradients too) W + 3W/N.
struct ZeroEstimateRow {
  std::string dtype;
  // Stages 0, 1, 2; nullopt where the weights cannot be trained (int8, int4).
  std::optional<std::array<double, 3>> per_process;
};

// `processes` must be at least 1.
std::vector<ZeroEstimateRow> zero_estimate_rows(const ModelSize& size,
                                                const std::vector<std::string>& dtypes,
                                                int processes);

// Bytes in the largest unit that keeps the number below 1024, rounded to
// two decimals without trailing zeros, as Accelerate prints them:
// 4e9 -> "3.73 GB", 16e9 -> "14.9 GB", 1024 -> "1.0 KB", 512 (whole) -> "512 bytes".
std::string format_bytes(double bytes, bool integral = false);

// A boxed table (the style of Accelerate's), every cell centred; the first
// line of `cells` is the header.
std::string render_box_table(const std::vector<std::vector<std::string>>& cells);

// The whole report: a title line, the parameter count and the table.
std::string render_estimate(const std::string& model_name, const ModelSize& size,
                            const std::vector<EstimateRow>& rows);

// The ZeRO report: a title line naming the processes, the table (same style
// and byte formatting as render_estimate's) and a line on the stages.
std::string render_zero_estimate(const std::vector<ZeroEstimateRow>& rows, int processes);

}  // namespace accelerate::cli
