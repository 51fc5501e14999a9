// Reading DeepSpeed JSON config files (see deepspeed_config.h). This file
// judges the file alone; deepspeed_config_resolve.cpp fills its "auto"s.
#include "sharding/deepspeed_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "sharding/json_input.h"

namespace accelerate::sharding {
namespace {

using json_input::as_integer;
using json_input::fail;
using json_input::fail_expects;
using json_input::is_auto;
using json_input::json;
using json_input::ObjectReader;
using json_input::parse_json;
using json_input::read_into;
using json_input::require_object;
using json_input::shown;

Fp16Section parse_fp16(const json& value, const std::string& source,
                       std::vector<std::string>* ignored) {
  require_object(source, "fp16", value);
  ObjectReader r(value, "fp16.", source, ignored);
  Fp16Section fp16;
  fp16.present = true;
  LossScaleSettings& s = fp16.loss_scaling;
  read_into(r, "enabled", fp16.enabled);
  read_into(r, "auto_cast", fp16.auto_cast);
  read_into(r, "loss_scale", s.loss_scale);
  read_into(r, "initial_scale_power", s.initial_scale_power, 0);
  // DeepSpeed divides by the window and floors the scale at min_loss_scale,
  // so both must be positive; a hysteresis below 1 would never lower the scale.
  read_into(r, "loss_scale_window", s.loss_scale_window, 1);
  read_into(r, "hysteresis", s.hysteresis, 1);
  read_into(r, "min_loss_scale", s.min_loss_scale, 1);
  read_into(r, "consecutive_hysteresis", s.consecutive_hysteresis);
  r.finish();
  return fp16;
}

Bf16Section parse_bf16(const json& value, const std::string& source,
                       std::vector<std::string>* ignored) {
  require_object(source, "bf16", value);
  ObjectReader r(value, "bf16.", source, ignored);
  Bf16Section bf16;
  bf16.present = true;
  read_into(r, "enabled", bf16.enabled);
  r.finish();
  return bf16;
}

OffloadSettings parse_offload(const json& value, const std::string& path, const std::string& source,
                              std::vector<std::string>* ignored) {
  OffloadSettings offload;
  if (value.is_null()) return offload;  // DeepSpeed's "no offload section"
  require_object(source, path, value);
  ObjectReader r(value, path + ".", source, ignored);
  if (const json* device = r.take("device")) {
    const std::string text = device->is_string() ? device->get<std::string>() : "";
    if (text == "none") {
      offload.device = AutoValue<OffloadDevice>::of(OffloadDevice::kNone);
    } else if (text == "cpu") {
      offload.device = AutoValue<OffloadDevice>::of(OffloadDevice::kCpu);
    } else if (text == "auto") {
      offload.device = AutoValue<OffloadDevice>::automatic();
    } else if (text == "nvme") {
      fail(source, r.path("device") +
                       " \"nvme\" is not supported by accelerate-cpp (use \"cpu\" or \"none\")");
    } else {
      fail_expects(source, r.path("device"), "\"none\", \"cpu\" or \"auto\"", *device);
    }
  }
  read_into(r, "pin_memory", offload.pin_memory);
  r.skip({"nvme_path"});  // meaningless without nvme; Accelerate itself writes it as null
  r.finish();
  return offload;
}

ZeroSettings parse_zero(const json& value, const std::string& source,
                        std::vector<std::string>* ignored) {
  // DeepSpeed's old `"zero_optimization": true` form is deprecated there; ask for the object.
  if (!value.is_object()) {
    fail_expects(source, "zero_optimization", "an object such as {\"stage\": 2}", value);
  }
  ObjectReader r(value, "zero_optimization.", source, ignored);
  ZeroSettings zero;
  if (const json* stage = r.take("stage")) {
    const auto number = as_integer(*stage);
    if (is_auto(*stage)) {
      zero.stage = AutoValue<int>::automatic();
    } else if (number && *number >= 0 && *number <= 3) {
      zero.stage = AutoValue<int>::of(static_cast<int>(*number));
    } else {
      fail_expects(source, r.path("stage"), "0, 1, 2, 3 or \"auto\"", *stage);
    }
  }
  read_into(r, "reduce_bucket_size", zero.reduce_bucket_size, 0);
  read_into(r, "allgather_bucket_size", zero.allgather_bucket_size, 0);
  read_into(r, "allgather_partitions", zero.allgather_partitions);
  read_into(r, "overlap_comm", zero.overlap_comm);
  read_into(r, "contiguous_gradients", zero.contiguous_gradients);
  read_into(r, "reduce_scatter", zero.reduce_scatter);
  read_into(r, "round_robin_gradients", zero.round_robin_gradients);
  if (const json* offload = r.take("offload_optimizer")) {
    zero.offload_optimizer = parse_offload(*offload, r.path("offload_optimizer"), source, ignored);
  }
  if (const json* offload = r.take("offload_param")) {
    zero.offload_param = parse_offload(*offload, r.path("offload_param"), source, ignored);
  }
  read_into(r, "stage3_prefetch_bucket_size", zero.stage3_prefetch_bucket_size, 0);
  read_into(r, "stage3_param_persistence_threshold", zero.stage3_param_persistence_threshold, 0);
  read_into(r, "stage3_max_live_parameters", zero.stage3_max_live_parameters, 0);
  read_into(r, "stage3_max_reuse_distance", zero.stage3_max_reuse_distance, 0);
  read_into(r, "sub_group_size", zero.sub_group_size, 0);
  read_into(r, "stage3_gather_16bit_weights_on_model_save",
            zero.stage3_gather_16bit_weights_on_model_save);
  read_into(r, "zero_hpz_partition_size", zero.zero_hpz_partition_size, 0);
  read_into(r, "zero_quantized_weights", zero.zero_quantized_weights);
  read_into(r, "zero_quantized_gradients", zero.zero_quantized_gradients);
  r.finish();
  return zero;
}

// optimizer / scheduler: {"type": "AdamW", "params": {...}}. Only the params
// in `fillable` may be "auto": those are the ones resolve() can fill.
ParamSection parse_param_section(const json& value, const std::string& name,
                                 const std::set<std::string>& fillable, const std::string& source,
                                 std::vector<std::string>* ignored) {
  require_object(source, name, value);
  ObjectReader r(value, name + ".", source, ignored);
  ParamSection section;
  const json* type = r.take("type");
  if (type == nullptr) fail(source, name + ".type is missing");
  if (!type->is_string() || type->get_ref<const std::string&>().empty() || is_auto(*type)) {
    fail_expects(source, name + ".type", "a name such as \"AdamW\"", *type);
  }
  section.type = type->get<std::string>();
  if (const json* params = r.take("params")) {
    require_object(source, name + ".params", *params);
    for (const auto& item : params->items()) {
      const std::string path = name + ".params." + item.key();
      const json& v = item.value();
      if (is_auto(v) && fillable.count(item.key())) {
        section.params[item.key()] = AutoValue<ParamValue>::automatic();
      } else if (v.is_number() && std::isfinite(v.get<double>())) {
        section.params[item.key()] = AutoValue<ParamValue>::of(v.get<double>());
      } else if (v.is_boolean()) {
        section.params[item.key()] = AutoValue<ParamValue>::of(v.get<bool>());
      } else if (v.is_string() && !is_auto(v)) {
        section.params[item.key()] = AutoValue<ParamValue>::of(v.get<std::string>());
      } else if (v.is_array() &&
                 std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number(); })) {
        section.params[item.key()] = AutoValue<ParamValue>::of(v.get<std::vector<double>>());
      } else {
        fail_expects(source, path, "a number, true, false, a word or a list of numbers", v);
      }
    }
  }
  r.finish();
  return section;
}

// Sections that change what training computes and that accelerate-cpp does
// not implement: refusing beats silently training differently.
struct Unsupported {
  const char* key;
  const char* what;
};
constexpr Unsupported kUnsupported[] = {
    {"pipeline", "pipeline parallelism"},
    {"sparse_attention", "sparse attention"},
    {"fp8", "fp8 training"},
    {"msamp", "MS-AMP fp8 training"},
    {"amp", "NVIDIA Apex AMP"},
    {"torch_autocast", "DeepSpeed's torch autocast mode"},
    {"progressive_layer_drop", "progressive layer drop"},
    {"curriculum_learning", "curriculum learning"},
    {"data_efficiency", "data efficiency"},
    {"compression_training", "compression training"},
    {"hybrid_engine", "the hybrid engine"},
    {"weight_quantization", "weight quantization"},
};

// A section written out but switched off ("enabled": false) changes nothing.
bool switched_off(const json& value) {
  if (!value.is_object()) return false;
  const auto enabled = value.find("enabled");
  return enabled != value.end() && enabled->is_boolean() && !enabled->get<bool>();
}

}  // namespace

DeepSpeedConfig parse_deepspeed_config(const std::string& json_text, const std::string& source) {
  const json document = parse_json(json_text, source);
  if (!document.is_object()) {
    fail(source, "expects a JSON object at the top level, got '" + shown(document) + "'");
  }
  DeepSpeedConfig config;
  config.source = source;
  std::vector<std::string>* ignored = &config.ignored_keys;
  ObjectReader r(document, "", source, ignored);
  for (const Unsupported& section : kUnsupported) {
    const json* value = r.take(section.key);
    if (value && !switched_off(*value)) {
      fail(source, std::string(section.key) + " (" + section.what +
                       ") is not supported by accelerate-cpp; remove it");
    }
  }
  // Logging and profiling only: they change no number the run computes.
  r.skip({"steps_per_print", "wall_clock_breakdown", "memory_breakdown", "dump_state",
          "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger",
          "timers"});

  read_into(r, "train_batch_size", config.train_batch_size, 1);
  read_into(r, "train_micro_batch_size_per_gpu", config.train_micro_batch_size_per_gpu, 1);
  read_into(r, "gradient_accumulation_steps", config.gradient_accumulation_steps, 1);
  read_into(r, "gradient_clipping", config.gradient_clipping);
  if (const json* wire = r.take("communication_data_type"); wire && !wire->is_null()) {
    const auto dtype =
        wire->is_string() ? parse_collective_dtype(wire->get<std::string>()) : std::nullopt;
    if (!dtype)
      fail_expects(source, "communication_data_type", "\"fp32\", \"fp16\" or \"bf16\"", *wire);
    config.communication_data_type = dtype;
  }
  if (const json* fp16 = r.take("fp16")) config.fp16 = parse_fp16(*fp16, source, ignored);
  if (const json* bf16 = r.take("bf16")) config.bf16 = parse_bf16(*bf16, source, ignored);
  // Accelerate refuses a file without this section.
  const json* zero = r.take("zero_optimization");
  if (zero == nullptr) {
    fail(source, "zero_optimization is missing; Accelerate requires it (e.g. {\"stage\": 2})");
  }
  config.zero_optimization = parse_zero(*zero, source, ignored);
  if (const json* tensor_parallel = r.take("tensor_parallel")) {
    require_object(source, "tensor_parallel", *tensor_parallel);
    ObjectReader tp(*tensor_parallel, "tensor_parallel.", source, ignored);
    read_into(tp, "autotp_size", config.autotp_size, 0);
    tp.finish();
  }
  if (const json* optimizer = r.take("optimizer")) {
    config.optimizer = parse_param_section(*optimizer, "optimizer",
                                           {"lr", "weight_decay", "betas", "eps"}, source, ignored);
  }
  if (const json* scheduler = r.take("scheduler")) {
    config.scheduler = parse_param_section(
        *scheduler, "scheduler",
        {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps"}, source, ignored);
  }
  r.finish();
  std::sort(config.ignored_keys.begin(), config.ignored_keys.end());
  return config;
}

DeepSpeedConfig read_deepspeed_config(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    fail(path, "cannot read the DeepSpeed config file: it is a directory");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    fail(path, std::string("cannot read the DeepSpeed config file: ") + std::strerror(errno));
  }
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) fail(path, "cannot read the DeepSpeed config file: read error");
  return parse_deepspeed_config(text.str(), path);
}

const std::vector<std::string>& keys_replaced_by_config_file() {
  static const std::vector<std::string> kKeys = {
      "gradient_accumulation_steps", "gradient_clipping",      "zero_stage",
      "offload_optimizer_device",    "offload_param_device",   "offload_param_nvme_path",
      "offload_optimizer_nvme_path", "zero3_save_16bit_model", "mixed_precision"};
  return kKeys;
}

void check_keys_beside_config_file(const std::vector<std::string>& keys,
                                   const std::string& accelerate_config,
                                   const std::string& deepspeed_config_file) {
  std::vector<std::string> clashing;
  for (const std::string& key : keys) {
    const auto& replaced = keys_replaced_by_config_file();
    if (std::find(replaced.begin(), replaced.end(), key) != replaced.end() &&
        std::find(clashing.begin(), clashing.end(), key) == clashing.end()) {
      clashing.push_back(key);
    }
  }
  if (clashing.empty()) return;
  std::string list;
  for (size_t i = 0; i < clashing.size(); ++i) {
    if (i > 0) list += i + 1 == clashing.size() ? " and " : ", ";
    list += clashing[i];
  }
  const bool one = clashing.size() == 1;
  const std::string them = one ? "it" : "them";
  fail(accelerate_config,
       list + (one ? " is" : " are") + " set together with deepspeed_config_file (" +
           deepspeed_config_file + "), which replaces " + them + ": remove " + them +
           " from the accelerate config and set " + them + " in " + deepspeed_config_file);
}

}  // namespace accelerate::sharding
