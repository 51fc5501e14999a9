// Reading a DeepSpeed JSON config file (the file an accelerate config names
// with `deepspeed_config_file`), and resolving its "auto" entries from what
// the program knows, with Accelerate's rules. LibTorch-free: the command line
// checks these files too. See docs/deepspeed-config.md.
//
// Two steps, as in Accelerate: parse_deepspeed_config reads the file alone
// (types, ranges, keys we cannot honour); resolve() fills every "auto" from
// ProgramValues and refuses contradictions between the file and the program.
// Every error is an accelerate::ConfigError with one line that starts with
// the file's path and names the key.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "accelerate/common/mixed_precision.h"
#include "accelerate/distributed/collective_dtype.h"
#include "accelerate/sharding/deepspeed_plugin.h"

namespace accelerate::sharding {

// A setting the file may leave out, write as "auto" (filled from the
// program by resolve()), or give a value.
template <class T>
struct AutoValue {
  enum class State { kAbsent, kAuto, kValue };
  State state = State::kAbsent;
  T value{};  // meaningful only when state is kValue

  static AutoValue automatic() { return {State::kAuto, T{}}; }
  static AutoValue of(T v) { return {State::kValue, std::move(v)}; }
  bool absent() const { return state == State::kAbsent; }
  bool is_auto() const { return state == State::kAuto; }
  bool has_value() const { return state == State::kValue; }
};

// Where ZeRO keeps optimizer states or parameters: the public enum of
// deepspeed_plugin.h. DeepSpeed's "nvme" is refused when the file is read.
using OffloadDevice = accelerate::OffloadDevice;

// fp16 loss scaling, with DeepSpeed's defaults.
struct LossScaleSettings {
  double loss_scale = 0;             // 0: dynamic loss scaling; > 0: this static scale
  int64_t initial_scale_power = 16;  // dynamic scaling starts at 2^16
  int64_t loss_scale_window = 1000;  // steps without overflow before the scale doubles
  int64_t hysteresis = 2;            // overflows tolerated before the scale halves
  bool consecutive_hysteresis = false;
  int64_t min_loss_scale = 1;
};

struct Fp16Section {
  bool present = false;     // the file has an "fp16" object
  AutoValue<bool> enabled;  // absent: DeepSpeed's default, false
  std::optional<bool> auto_cast;
  LossScaleSettings loss_scaling;
};

struct Bf16Section {
  bool present = false;     // the file has a "bf16" object
  AutoValue<bool> enabled;  // absent: DeepSpeed's default, false
};

struct OffloadSettings {
  AutoValue<OffloadDevice> device;  // absent or "auto": none
  bool pin_memory = true;           // DeepSpeed's default
};

// zero_optimization, with DeepSpeed's defaults. The three "auto"-able sizes
// are derived from the model's hidden size (ProgramValues::hidden_size).
struct ZeroSettings {
  AutoValue<int> stage;                   // 0-3; "auto": 2, Accelerate's default stage
  AutoValue<int64_t> reduce_bucket_size;  // absent: 5e8; "auto": hidden_size^2
  int64_t allgather_bucket_size = 500000000;
  bool allgather_partitions = true;
  std::optional<bool> overlap_comm;  // absent: true at stage 3, false below (DeepSpeed)
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  bool round_robin_gradients = false;
  OffloadSettings offload_optimizer;
  OffloadSettings offload_param;
  // Stage 3 (kept for the stage-3 engine; parsed at every stage).
  AutoValue<int64_t> stage3_prefetch_bucket_size;         // absent: 5e7; "auto": int(0.9 h^2)
  AutoValue<int64_t> stage3_param_persistence_threshold;  // absent: 1e5; "auto": 10 h
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  int64_t sub_group_size = 1000000000;
  AutoValue<bool> stage3_gather_16bit_weights_on_model_save;  // absent or "auto": false
  // ZeRO++ hpZ (stage 3): each group of this many consecutive processes
  // keeps a secondary copy of the gathered parameters, partitioned among
  // them; 0 and 1 (DeepSpeed's default): off. DeepSpeed takes no "auto".
  int64_t zero_hpz_partition_size = 1;
  // ZeRO++ qwZ / qgZ (stage 3; DeepSpeed's defaults false): parameters
  // gathered as int8 blocks, gradients reduce-scattered as int4 blocks
  // (docs/sharding.md, "Quantized communication").
  bool zero_quantized_weights = false;
  bool zero_quantized_gradients = false;
};

// One entry of optimizer.params or scheduler.params: a number, a flag, a
// word (e.g. warmup_type "log") or a list of numbers (betas).
using ParamValue = std::variant<double, bool, std::string, std::vector<double>>;

// The optimizer or scheduler section: {"type": ..., "params": {...}}.
struct ParamSection {
  std::string type;
  std::map<std::string, AutoValue<ParamValue>> params;
};

struct DeepSpeedConfig {
  std::string source;  // the path (or name) errors start with
  AutoValue<int64_t> train_batch_size;
  AutoValue<int64_t> train_micro_batch_size_per_gpu;
  AutoValue<int64_t> gradient_accumulation_steps;  // absent: 1 (Accelerate)
  AutoValue<double> gradient_clipping;             // absent: 0, no clipping (DeepSpeed)
  Fp16Section fp16;
  Bf16Section bf16;
  ZeroSettings zero_optimization;  // the section is required (Accelerate)
  std::optional<ParamSection> optimizer;
  std::optional<ParamSection> scheduler;
  // The gradients' reduce-scatters (stages 2-3) carry this dtype: "fp32",
  // "fp16" or "bf16" in any case, as DeepSpeed reads it. Absent or null:
  // the gradients' own dtype (fp32), which is not DeepSpeed's default
  // under bf16/fp16 (docs/sharding.md, "Low-precision collectives").
  std::optional<CollectiveDtype> communication_data_type;
  // tensor_parallel.autotp_size: DeepSpeed's AutoTP training, tensor
  // parallelism over groups of this many consecutive ranks (0 or 1: none).
  int64_t autotp_size = 0;
  // Keys read but not used, as dotted paths ("zero_optimization.elastic_checkpoint"),
  // each once, sorted: for the caller to print once. Logging-only keys
  // (steps_per_print, wall_clock_breakdown, ...) are not listed.
  std::vector<std::string> ignored_keys;
};

// Parses `json_text`; `source` names it in errors (usually the path).
DeepSpeedConfig parse_deepspeed_config(const std::string& json_text, const std::string& source);

// Reads and parses the file at `path`.
DeepSpeedConfig read_deepspeed_config(const std::string& path);

// What the program knows, for filling "auto".
struct ProgramValues {
  int64_t world_size = 1;  // processes
  // The batch size each process's prepared training data loader yields (with
  // split_batches, the loader's batch size divided by world_size).
  std::optional<int64_t> micro_batch_size;
  int64_t gradient_accumulation_steps = 1;  // the Accelerator's
  std::optional<double> gradient_clipping;  // a clipping norm the launch asked for
  MixedPrecision mixed_precision = MixedPrecision::kNo;
  // The model's hidden size, for reduce_bucket_size and the stage-3 sizes.
  std::optional<int64_t> hidden_size;
  // False: a caller that does not use those sizes; their "auto" is left 0
  // when hidden_size is not given, instead of refused.
  bool needs_hidden_size_keys = true;
  // The program's optimizer, for optimizer.params and scheduler.params.
  std::optional<double> lr;
  std::optional<double> weight_decay;
  std::optional<std::array<double, 2>> betas;
  std::optional<double> eps;
  // The program's learning-rate schedule, for scheduler.params.
  int64_t warmup_num_steps = 0;            // Accelerate's DummyScheduler default
  std::optional<int64_t> total_num_steps;  // optimizer steps of the whole run, all processes
  bool split_batches = false;
};

struct ResolvedZero {
  int stage = 0;
  int64_t reduce_bucket_size = 0;
  int64_t allgather_bucket_size = 0;
  bool allgather_partitions = true;
  bool overlap_comm = false;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  bool round_robin_gradients = false;
  OffloadDevice offload_optimizer_device = OffloadDevice::kNone;
  bool offload_optimizer_pin_memory = true;
  OffloadDevice offload_param_device = OffloadDevice::kNone;
  bool offload_param_pin_memory = true;
  int64_t stage3_prefetch_bucket_size = 0;
  int64_t stage3_param_persistence_threshold = 0;
  int64_t stage3_max_live_parameters = 0;
  int64_t stage3_max_reuse_distance = 0;
  int64_t sub_group_size = 0;
  bool stage3_gather_16bit_weights_on_model_save = false;
  int64_t zero_hpz_partition_size = 1;
  bool zero_quantized_weights = false;
  bool zero_quantized_gradients = false;
};

struct ResolvedParamSection {
  std::string type;
  std::map<std::string, ParamValue> params;
};

// The file with every "auto" filled and every default applied.
struct ResolvedDeepSpeedConfig {
  std::string source;
  int64_t train_batch_size = 0;  // = micro * accumulation * world size
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 1;
  double gradient_clipping = 0;  // 0: no clipping
  MixedPrecision precision = MixedPrecision::kNo;
  bool fp16_auto_cast = false;
  LossScaleSettings loss_scaling;  // used when precision is kFP16
  ResolvedZero zero_optimization;
  std::optional<ResolvedParamSection> optimizer;
  std::optional<ResolvedParamSection> scheduler;
  // One line each, starting with the path: where the file's value replaced
  // the program's (as Accelerate does, with a warning). For the caller to print.
  std::vector<std::string> notes;
  std::vector<std::string> ignored_keys;  // as in DeepSpeedConfig
};

// Fills every "auto" the way Accelerate does and checks the file against the
// program; throws ConfigError (one line naming both sides) on a
// contradiction. Throws std::invalid_argument if `program` is malformed
// (world_size, gradient_accumulation_steps or micro_batch_size below 1).
ResolvedDeepSpeedConfig resolve(const DeepSpeedConfig& config, const ProgramValues& program);

// The file's optimizer / scheduler section (which must be there) with its
// "auto" values filled as resolve() fills them.
ResolvedParamSection resolve_optimizer_section(const DeepSpeedConfig& config,
                                               const ProgramValues& program);
ResolvedParamSection resolve_scheduler_section(const DeepSpeedConfig& config,
                                               const ProgramValues& program);

// The precision a run with this file computes in, given the job's
// mixed_precision (part of resolve()): a missing fp16/bf16 section or
// "enabled": "auto" follows mixed_precision, a literal true/false is the
// file's choice. Runs check_mixed_precision; throws ConfigError when both
// types end up enabled. Appends a note to `notes` (may be null) when the
// file overrides mixed_precision.
MixedPrecision resolve_mixed_precision(const DeepSpeedConfig& config,
                                       MixedPrecision mixed_precision,
                                       std::vector<std::string>* notes);

// Accelerate's refusal of a file that switches on the other 16-bit type
// than `mixed_precision` names (fp16.enabled true with bf16, bf16.enabled
// true with fp16). resolve() runs it too; `accelerate launch` runs it before
// any process starts. Throws ConfigError.
void check_mixed_precision(const DeepSpeedConfig& config, MixedPrecision mixed_precision);

// The accelerate config (YAML) deepspeed_config keys that a DeepSpeed config
// file replaces, in Accelerate's order, plus "mixed_precision" (the top-level
// key, when the YAML sets it and no --mixed_precision flag overrides it).
const std::vector<std::string>& keys_replaced_by_config_file();

// Accelerate refuses an accelerate config that sets any of
// keys_replaced_by_config_file() together with deepspeed_config_file. `keys`
// are the key names the YAML sets (others are allowed and skipped);
// `accelerate_config` names the YAML in the error, `deepspeed_config_file`
// the JSON file.
void check_keys_beside_config_file(const std::vector<std::string>& keys,
                                   const std::string& accelerate_config,
                                   const std::string& deepspeed_config_file);

}  // namespace accelerate::sharding
