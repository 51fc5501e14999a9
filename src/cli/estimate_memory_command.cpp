#include "cli/estimate_memory_command.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <optional>

#include "accelerate/common/errors.h"
#include "cli/memory_estimate.h"
#include "cli/training_estimate.h"
#include "cli/training_report.h"
#include "cli/transformer_shape.h"
#include "common/environment_text.h"
#include "common/settings.h"

namespace accelerate::cli {
namespace {

constexpr int kUsageExitCode = 2;

const char* const kHelp =
    "usage: accelerate estimate-memory MODEL [--dtypes DTYPE [DTYPE ...]] [--num_processes N]\n"
    "         [--zero_stage S | --fsdp_sharding_strategy STRATEGY] [--num_nodes M]\n"
    "         [--offload_optimizer] [--offload_param] [--mixed_precision no|fp16|bf16]\n"
    "         [--seq_len T] [--micro_batch_size B] [--activation_checkpointing]\n"
    "         [--parallelism_config_tp_size N] [--vocab_size V]\n"
    "\n"
    "Estimates the memory a model needs to load (largest layer, total size) and\n"
    "to train with Adam at batch size 1 (no activations), per dtype, with the\n"
    "formulas of Hugging Face Accelerate's estimate-memory.\n"
    "\n"
    "MODEL is one of:\n"
    "  a parameter count     7B, 350M, 1.5k, 1.3e9, 125000000 (K, M, B/G, T suffixes)\n"
    "  a .safetensors file   only its header is read\n"
    "  a safetensors index   model.safetensors.index.json and the shards it names\n"
    "  a directory           holding an index, model.safetensors, or *.safetensors shards\n"
    "                        (and a config.json, used for activations)\n"
    "  a config.json         Hugging Face GPT-2, Llama or BERT config (sizes from its shape)\n"
    "  gpt-tiny, gpt-small   the GPT example's presets\n"
    "\n"
    "options:\n"
    "  --dtypes DTYPE ...    any of float32 float16 bfloat16 int8 int4 (default: all)\n"
    "  --num_processes N     also print, per process when training on N processes with\n"
    "                        ZeRO stage 0 (data parallel), 1 (Adam states sharded) and\n"
    "                        2 (gradients too), the bytes of parameters + gradients +\n"
    "                        Adam states, all in the weights' dtype (no activations)\n"
    "\n"
    "training (any of these adds a table per process, device and host apart):\n"
    "  --zero_stage S        0 (data parallel), 1, 2 or 3 (default 0)\n"
    "  --fsdp_sharding_strategy FULL_SHARD|SHARD_GRAD_OP|NO_SHARD|HYBRID_SHARD|\n"
    "                        HYBRID_SHARD_ZERO2 (instead of --zero_stage)\n"
    "  --num_nodes M         machines (--num_machines too); divides --num_processes\n"
    "  --offload_optimizer   Adam states, host copies of the shards (stages 1-3)\n"
    "  --offload_param       parameter shards in host memory (stage 3)\n"
    "  --mixed_precision P   no, fp16 or bf16 (autocast: weights stay fp32)\n"
    "  --seq_len T           tokens per sequence (default: the config's context)\n"
    "  --micro_batch_size B  sequences per process and step (default 1)\n"
    "  --activation_checkpointing  recompute each block in backward\n"
    "  --parallelism_config_tp_size N  tensor parallelism over groups of N processes\n"
    "                        (GPT-2, Llama, BERT); ZeRO shards over the rest; model state only\n"
    "  --vocab_size V        the GPT presets' vocabulary (default 4096)\n"
    "  -h, --help            show this help\n";

struct EstimateArguments {
  bool help = false;
  std::string model;
  std::vector<std::string> dtypes;
  std::optional<int> num_processes;  // --num_processes: add the ZeRO table
  // The training section's flags; `training` is set when any was given.
  bool training = false;
  TrainingSetup setup;
  bool stage_given = false, strategy_given = false;
  std::optional<int64_t> seq_len, micro_batch, vocab;
  bool checkpointing = false;
  bool activation_flag = false;  // --seq_len, --micro_batch_size or --activation_checkpointing
};

bool is_known_dtype(const std::string& dtype) {
  const auto& known = known_estimate_dtypes();
  return std::find(known.begin(), known.end(), dtype) != known.end();
}

std::string known_dtype_list() {
  std::string list;
  for (const auto& dtype : known_estimate_dtypes()) list += (list.empty() ? "" : ", ") + dtype;
  return list;
}

void add_dtype(EstimateArguments& parsed, const std::string& dtype) {
  if (!is_known_dtype(dtype)) {
    throw ConfigError("--dtypes: unknown dtype '" + dtype + "' (choose from " + known_dtype_list() +
                      "; put MODEL before --dtypes)");
  }
  if (std::find(parsed.dtypes.begin(), parsed.dtypes.end(), dtype) == parsed.dtypes.end()) {
    parsed.dtypes.push_back(dtype);
  }
}

int parse_num_processes(const std::string& spelled, const std::string& value) {
  const auto number = detail::parse_integer_in(value, 1, settings::kMaxCount);
  if (!number)
    throw ConfigError(settings::bad_value_message(spelled, settings::count_expectation(), value));
  return static_cast<int>(*number);
}

int64_t parse_size(const std::string& spelled, const std::string& value) {
  const auto number = detail::parse_integer_in(value, 1, 1LL << 40);
  if (!number)
    throw ConfigError(settings::bad_value_message(spelled, "a whole number >= 1", value));
  return *number;
}

// --fsdp_sharding_strategy: Accelerate's names (or their numbers 1-5) as
// ZeRO stages; the HYBRID ones shard within a node.
void apply_strategy(TrainingSetup& setup, const std::string& value) {
  static const std::pair<const char*, std::pair<int, bool>> kStrategies[] = {
      {"FULL_SHARD", {3, false}},
      {"SHARD_GRAD_OP", {2, false}},
      {"NO_SHARD", {0, false}},
      {"HYBRID_SHARD", {3, true}},
      {"HYBRID_SHARD_ZERO2", {2, true}}};
  for (size_t k = 0; k < std::size(kStrategies); ++k) {
    if (value == kStrategies[k].first || value == std::to_string(k + 1)) {
      setup.zero_stage = kStrategies[k].second.first;
      setup.hybrid = kStrategies[k].second.second;
      return;
    }
  }
  throw ConfigError(settings::bad_value_message(
      "--fsdp_sharding_strategy",
      "one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2", value));
}

bool parse_device(const std::string& spelled, const std::string& value) {
  if (value == "cpu") return true;
  if (value == "none") return false;
  throw ConfigError(settings::bad_value_message(spelled, "cpu or none", value));
}

// A flag with a value ("--flag V" or "--flag=V"): sets *value and returns
// true when args[i] is `name` (or its dashed spelling).
bool take_value(const std::vector<std::string>& args, size_t& i, const std::string& name,
                std::string* spelled, std::string* value) {
  std::string dashed = name;
  std::replace(dashed.begin() + 2, dashed.end(), '_', '-');
  const std::string& arg = args[i];
  for (const std::string& form : {name, dashed}) {
    if (arg == form) {
      if (i + 1 >= args.size()) throw ConfigError(form + " needs a value");
      *spelled = form;
      *value = args[++i];
      return true;
    }
    if (arg.rfind(form + "=", 0) == 0) {
      *spelled = form;
      *value = arg.substr(form.size() + 1);
      return true;
    }
  }
  return false;
}

// The training flags; false when args[i] is none of them.
bool parse_training_flag(const std::vector<std::string>& args, size_t& i,
                         EstimateArguments& parsed) {
  std::string spelled, value;
  TrainingSetup& setup = parsed.setup;
  const std::string& arg = args[i];
  if (take_value(args, i, "--zero_stage", &spelled, &value)) {
    const auto stage = detail::parse_integer_in(value, 0, 3);
    if (!stage) throw ConfigError(settings::bad_value_message(spelled, "0, 1, 2 or 3", value));
    setup.zero_stage = static_cast<int>(*stage);
    parsed.stage_given = true;
  } else if (take_value(args, i, "--fsdp_sharding_strategy", &spelled, &value)) {
    apply_strategy(setup, value);
    parsed.strategy_given = true;
  } else if (take_value(args, i, "--num_nodes", &spelled, &value) ||
             take_value(args, i, "--num_machines", &spelled, &value)) {
    setup.num_nodes = parse_num_processes(spelled, value);
  } else if (arg == "--offload_optimizer" || arg == "--offload-optimizer") {
    setup.offload_optimizer = true;
  } else if (arg == "--offload_param" || arg == "--offload-param") {
    setup.offload_param = true;
  } else if (take_value(args, i, "--offload_optimizer_device", &spelled, &value)) {
    setup.offload_optimizer = parse_device(spelled, value);
  } else if (take_value(args, i, "--offload_param_device", &spelled, &value)) {
    setup.offload_param = parse_device(spelled, value);
  } else if (take_value(args, i, "--mixed_precision", &spelled, &value)) {
    if (value == "no") {
      setup.mixed_precision = EstimateMixedPrecision::kNo;
    } else if (value == "fp16") {
      setup.mixed_precision = EstimateMixedPrecision::kFp16;
    } else if (value == "bf16") {
      setup.mixed_precision = EstimateMixedPrecision::kBf16;
    } else {
      throw ConfigError(settings::bad_value_message(spelled, "one of no, fp16, bf16", value));
    }
  } else if (take_value(args, i, "--seq_len", &spelled, &value)) {
    parsed.seq_len = parse_size(spelled, value);
    parsed.activation_flag = true;
  } else if (take_value(args, i, "--micro_batch_size", &spelled, &value)) {
    parsed.micro_batch = parse_size(spelled, value);
    parsed.activation_flag = true;
  } else if (arg == "--activation_checkpointing" || arg == "--activation-checkpointing" ||
             arg == "--gradient_checkpointing") {
    parsed.checkpointing = true;
    parsed.activation_flag = true;
  } else if (take_value(args, i, "--parallelism_config_tp_size", &spelled, &value)) {
    setup.tp_size = parse_num_processes(spelled, value);
  } else if (take_value(args, i, "--vocab_size", &spelled, &value)) {
    parsed.vocab = parse_size(spelled, value);
    return true;  // a model setting, not a training one
  } else {
    return false;
  }
  parsed.training = true;
  return true;
}

void check_training(const EstimateArguments& parsed) {
  const TrainingSetup& setup = parsed.setup;
  if (parsed.stage_given && parsed.strategy_given)
    throw ConfigError("give --zero_stage or --fsdp_sharding_strategy, not both");
  if (setup.num_nodes > setup.num_processes || setup.num_processes % setup.num_nodes != 0) {
    throw ConfigError("--num_nodes " + std::to_string(setup.num_nodes) + " does not divide " +
                      "--num_processes " + std::to_string(setup.num_processes) +
                      " (every node runs as many processes)");
  }
  if (setup.offload_param && setup.zero_stage != 3) {
    throw ConfigError(
        "--offload_param needs ZeRO stage 3 (parameters are sharded only there), "
        "got stage " +
        std::to_string(setup.zero_stage));
  }
  if (setup.num_processes % setup.tp_size != 0 ||
      (setup.hybrid && setup.processes_per_node() % setup.tp_size != 0)) {
    throw ConfigError(
        "--parallelism_config_tp_size " + std::to_string(setup.tp_size) + " does not divide " +
        (setup.hybrid ? "a node's " + std::to_string(setup.processes_per_node()) + " processes"
                      : "--num_processes " + std::to_string(setup.num_processes)));
  }
  if (setup.tp_size > 1 && parsed.activation_flag) {
    throw ConfigError(
        "activations at tensor parallelism are not estimated yet; drop --seq_len, "
        "--micro_batch_size and --activation_checkpointing, or --parallelism_config_tp_size");
  }
  if (setup.offload_optimizer && setup.zero_stage == 0)
    throw ConfigError("--offload_optimizer needs ZeRO stage 1, 2 or 3 (it offloads shards)");
  if (parsed.activation_flag && setup.mixed_precision == EstimateMixedPrecision::kFp16) {
    throw ConfigError(
        "activations under fp16 autocast are not estimated (measured: fp32, and bf16 for "
        "GPT-2-style models); drop --mixed_precision fp16 or the activation flags");
  }
}

EstimateArguments parse(const std::vector<std::string>& args) {
  EstimateArguments parsed;
  bool dtypes_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      return parsed;
    }
    if (arg == "--dtypes" || arg.rfind("--dtypes=", 0) == 0) {
      dtypes_given = true;
      size_t before = parsed.dtypes.size();
      if (arg != "--dtypes") add_dtype(parsed, arg.substr(9));
      // Like argparse's nargs="+": values up to the next flag.
      while (i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0) add_dtype(parsed, args[++i]);
      if (parsed.dtypes.size() == before && arg == "--dtypes") {
        throw ConfigError("--dtypes expects at least one of " + known_dtype_list());
      }
    } else if (arg == "--num_processes" || arg == "--num-processes") {
      if (i + 1 >= args.size()) {
        throw ConfigError(arg + " needs a value (" + settings::count_expectation() + ")");
      }
      parsed.num_processes = parse_num_processes(arg, args[++i]);
    } else if (arg.rfind("--num_processes=", 0) == 0 || arg.rfind("--num-processes=", 0) == 0) {
      const size_t equals = arg.find('=');
      parsed.num_processes = parse_num_processes(arg.substr(0, equals), arg.substr(equals + 1));
    } else if (parse_training_flag(args, i, parsed)) {
      continue;
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw ConfigError("unknown option '" + arg + "' (see 'accelerate estimate-memory --help')");
    } else if (!parsed.model.empty()) {
      throw ConfigError("one MODEL only, got '" + parsed.model + "' and '" + arg + "'");
    } else {
      parsed.model = arg;
    }
  }
  if (parsed.model.empty()) {
    throw ConfigError(
        "MODEL is missing: give a parameter count (7B, 350M, 1.3e9), a .safetensors "
        "file, index or directory, a config.json or a GPT preset (gpt-tiny, gpt-small)");
  }
  if (!dtypes_given) parsed.dtypes = known_estimate_dtypes();
  parsed.setup.num_processes = parsed.num_processes.value_or(1);
  check_training(parsed);
  return parsed;
}

bool path_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A directory's safetensors files or index, the weights' sizes win over a
// config.json beside them.
bool holds_safetensors(const std::string& directory) {
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) return false;
  bool found = false;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    found = found || ends_with(name, ".safetensors") || ends_with(name, ".index.json");
  }
  ::closedir(dir);
  return found;
}

ModelSize size_from_shape(const TransformerShape& shape) {
  ModelSize size = model_size_from_count(static_cast<uint64_t>(total_parameters(shape)));
  size.largest_layer_bytes = 4 * static_cast<uint64_t>(largest_layer_parameters(shape));
  size.largest_layer_name = largest_layer_parameters(shape) == shape.vocab * shape.hidden
                                ? "token embedding (from the config)"
                                : "one layer (from the config)";
  return size;
}

struct ResolvedModel {
  ModelSize size;
  std::optional<TransformerShape> shape;
};

ResolvedModel resolve_model(const EstimateArguments& parsed) {
  const std::string& model = parsed.model;
  ResolvedModel resolved;
  std::string preset;
  // An existing path wins, so a directory called "7B" is read, not counted.
  if (!path_exists(model) && is_gpt_preset_name(model, &preset)) {
    TransformerShape shape = gpt_preset(preset, parsed.vocab.value_or(4096));
    // As the example's --block_size: the position table is the context.
    if (parsed.seq_len) shape.positions = *parsed.seq_len;
    resolved.shape = shape;
  } else if (parsed.vocab) {
    throw ConfigError("--vocab_size applies to the GPT presets (gpt-tiny, gpt-small) only");
  } else if (path_exists(model)) {
    const bool directory = is_directory(model);
    const std::string config = directory ? model + "/config.json" : model;
    const bool config_file =
        !directory && ends_with(model, ".json") && !ends_with(model, ".index.json");
    if (config_file || (directory && path_exists(config) && !holds_safetensors(model))) {
      resolved.shape = transformer_from_config_json(config);
    } else {
      resolved.size = model_size_from_path(model);
      // A config beside the weights gives the activations' shape, read only
      // when the training section is asked for.
      if (directory && parsed.training && path_exists(config))
        resolved.shape = transformer_from_config_json(config);
      return resolved;
    }
  } else if (auto count = parse_parameter_count(model)) {
    resolved.size = model_size_from_count(*count);
    return resolved;
  } else {
    throw ConfigError("'" + model +
                      "' is neither a parameter count (like 7B, 350M, 1.3e9 or "
                      "125000000, at most 1e15), an existing .safetensors file, index, "
                      "directory or config.json, nor a GPT preset (gpt-tiny, gpt-small); "
                      "Hub names are not downloaded: give the folder of a downloaded copy "
                      "(huggingface-cli download NAME --local-dir DIR)");
  }
  resolved.size = size_from_shape(*resolved.shape);
  return resolved;
}

TrainingReportInput training_input(const EstimateArguments& parsed, const ResolvedModel& model) {
  TrainingReportInput input;
  input.setup = parsed.setup;
  input.parameters = static_cast<double>(model.size.parameters);
  if (model.size.largest_layer_bytes)
    input.largest_layer_parameters = static_cast<double>(*model.size.largest_layer_bytes) / 4;
  if (!model.shape) {
    if (parsed.setup.tp_size > 1) {
      throw ConfigError(
          "--parallelism_config_tp_size needs a transformer's shape (which parameters the plan "
          "splits): a config.json or a GPT preset (gpt-tiny, gpt-small)");
    }
    if (parsed.activation_flag) {
      throw ConfigError(
          "--seq_len, --micro_batch_size and --activation_checkpointing need a "
          "transformer's shape: a config.json or a GPT preset (gpt-tiny, gpt-small)");
    }
    return input;
  }
  const TransformerShape& shape = *model.shape;
  input.shape = shape;
  if (parsed.setup.tp_size > 1) {
    // Each process holds its parts: the model state of one process's
    // parameters, sharded over its data-parallel group.
    const ProcessParameters held = parameters_per_process(shape, parsed.setup.tp_size);
    input.parameters = held.total;
    input.outside_units = held.outside;
    input.unit_parameters = held.block;
    input.largest_layer_parameters.reset();
    return input;
  }
  input.outside_units = static_cast<double>(outside_block_parameters(shape));
  input.unit_parameters = static_cast<double>(block_parameters(shape));
  const bool bf16 = parsed.setup.mixed_precision == EstimateMixedPrecision::kBf16;
  if (parsed.setup.mixed_precision == EstimateMixedPrecision::kFp16) return input;
  if (bf16 && shape.family != TransformerFamily::kGpt2) {
    if (!parsed.activation_flag) return input;
    throw ConfigError(std::string("activations under bf16 autocast are estimated for GPT-2-style "
                                  "models only (measured); ") +
                      family_name(shape.family) + ": fp32 only, drop --mixed_precision");
  }
  ActivationOptions activations;
  activations.bf16 = bf16;
  activations.seq_len = parsed.seq_len.value_or(shape.positions);
  activations.micro_batch = parsed.micro_batch.value_or(1);
  activations.checkpointing = parsed.checkpointing;
  if (activations.seq_len == 0)
    throw ConfigError(shape.source + " has no max_position_embeddings: give --seq_len");
  if (shape.family != TransformerFamily::kLlama && activations.seq_len > shape.positions) {
    throw ConfigError("--seq_len " + std::to_string(activations.seq_len) + " exceeds the " +
                      std::to_string(shape.positions) + " positions of " + shape.source);
  }
  input.activations = activations;
  return input;
}

}  // namespace

int run_estimate_memory_command(const std::vector<std::string>& args) {
  try {
    const EstimateArguments parsed = parse(args);
    if (parsed.help) {
      std::cout << kHelp;
      return 0;
    }
    const ResolvedModel model = resolve_model(parsed);
    const ModelSize& size = model.size;
    // Computed before anything is printed, so a bad combination is one line.
    std::optional<TrainingReportInput> training;
    if (parsed.training) training = training_input(parsed, model);
    std::cout << render_estimate(parsed.model, size, estimate_rows(size, parsed.dtypes));
    if (parsed.num_processes) {
      std::cout << "\n"
                << render_zero_estimate(
                       zero_estimate_rows(size, parsed.dtypes, *parsed.num_processes),
                       *parsed.num_processes);
    }
    if (training) std::cout << "\n" << render_training_estimate(*training);
    return 0;
  } catch (const std::exception& error) {
    // Every failure here is about the input: a flag, a count or a file.
    std::cerr << "accelerate estimate-memory: error: " << error.what() << "\n";
    return kUsageExitCode;
  }
}

}  // namespace accelerate::cli
