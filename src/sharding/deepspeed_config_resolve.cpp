// Filling a DeepSpeed config's "auto" entries from the program, with
// Accelerate's rules (see deepspeed_config.h and docs/deepspeed-config.md).
//
// Accelerate fills "auto" in two places: when the plugin is built (zero
// stage, offload devices, 16-bit saving: from the launch settings, whose
// defaults are stage 2, "none", false) and when prepare() sees the data
// loader, model, optimizer and scheduler (batch sizes, accumulation,
// clipping, bucket sizes, optimizer and scheduler params). Where the file
// gives a number that differs from the program's, Accelerate keeps the
// file's; so do we, with a note. DeepSpeed then checks the batch
// arithmetic and the precision flags; we run those checks here, up front.
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "accelerate/common/errors.h"
#include "common/environment_text.h"
#include "sharding/deepspeed_config.h"

namespace accelerate::sharding {
namespace {

[[noreturn]] void fail(const std::string& source, const std::string& problem) {
  throw ConfigError(source + ": " + problem);
}

int64_t multiply(const std::string& source, int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    fail(source, "train_batch_size overflows: " + std::to_string(a) + " * " + std::to_string(b));
  }
  return product;
}

void check_program(const ProgramValues& program) {
  if (program.world_size < 1) {
    throw std::invalid_argument("ProgramValues::world_size must be at least 1");
  }
  if (program.gradient_accumulation_steps < 1) {
    throw std::invalid_argument("ProgramValues::gradient_accumulation_steps must be at least 1");
  }
  // Bounded so hidden_size^2 cannot overflow.
  if (program.hidden_size &&
      (*program.hidden_size < 1 || *program.hidden_size > (int64_t{1} << 31))) {
    throw std::invalid_argument("ProgramValues::hidden_size must be between 1 and 2^31");
  }
  if (program.micro_batch_size && *program.micro_batch_size < 1) {
    throw std::invalid_argument("ProgramValues::micro_batch_size must be at least 1");
  }
}

void resolve_precision(const DeepSpeedConfig& config, const ProgramValues& program,
                       ResolvedDeepSpeedConfig& out) {
  out.precision = resolve_mixed_precision(config, program.mixed_precision, &out.notes);
  const bool fp16 = out.precision == MixedPrecision::kFP16;
  // Accelerate adds {"enabled": true, "auto_cast": true} when fp16 is wanted and the file has no
  // section.
  out.fp16_auto_cast = config.fp16.present ? config.fp16.auto_cast.value_or(false) : fp16;
  out.loss_scaling = config.fp16.loss_scaling;
}

// train_micro_batch_size_per_gpu, gradient_accumulation_steps, train_batch_size.
void resolve_batch(const DeepSpeedConfig& config, const ProgramValues& program,
                   ResolvedDeepSpeedConfig& out) {
  const std::string& source = config.source;
  // Accelerate writes 1 into a file without the key, then keeps the file's
  // value over the Accelerator's, with a warning.
  const auto& gas = config.gradient_accumulation_steps;
  out.gradient_accumulation_steps = gas.is_auto()     ? program.gradient_accumulation_steps
                                    : gas.has_value() ? gas.value
                                                      : 1;
  if (out.gradient_accumulation_steps != program.gradient_accumulation_steps) {
    const std::string file_side =
        gas.has_value() ? "gradient_accumulation_steps is " + std::to_string(gas.value)
                        : "gradient_accumulation_steps is not set, which Accelerate reads as 1,";
    out.notes.push_back(source + ": " + file_side +
                        " but the Accelerator's gradient_accumulation_steps is " +
                        std::to_string(program.gradient_accumulation_steps) + "; the file's " +
                        std::to_string(out.gradient_accumulation_steps) +
                        " is used, as in Accelerate (write \"auto\" to use the Accelerator's)");
  }

  const auto& micro = config.train_micro_batch_size_per_gpu;
  const auto& train = config.train_batch_size;
  std::optional<int64_t> micro_size;
  if (micro.is_auto()) {
    if (!program.micro_batch_size) {
      fail(source,
           "train_micro_batch_size_per_gpu is \"auto\" but the program prepared no data loader "
           "before or with its optimizer; prepare the loader with the optimizer, or write a "
           "number");
    }
    micro_size = *program.micro_batch_size;
  } else if (micro.has_value()) {
    micro_size = micro.value;
    // Accelerate hands DeepSpeed the file's number without comparing it with the loader's.
    if (program.micro_batch_size && *program.micro_batch_size != micro.value) {
      out.notes.push_back(source + ": train_micro_batch_size_per_gpu is " +
                          std::to_string(micro.value) +
                          " but the data loader's batch size per process is " +
                          std::to_string(*program.micro_batch_size) +
                          "; DeepSpeed is given the file's " + std::to_string(micro.value));
    }
  }

  const int64_t per_micro_batch =
      multiply(source, out.gradient_accumulation_steps, program.world_size);
  const std::string factors =
      std::to_string(out.gradient_accumulation_steps) + " * " + std::to_string(program.world_size);
  if (micro_size) {
    out.train_micro_batch_size_per_gpu = *micro_size;
    out.train_batch_size = multiply(source, *micro_size, per_micro_batch);
    // DeepSpeed's batch assertion.
    if (train.has_value() && train.value != out.train_batch_size) {
      fail(
          source,
          "train_batch_size is " + std::to_string(train.value) +
              " but train_micro_batch_size_per_gpu * gradient_accumulation_steps * world size is " +
              std::to_string(*micro_size) + " * " + factors + " = " +
              std::to_string(out.train_batch_size));
    }
    return;
  }
  if (train.is_auto()) {
    fail(source,
         "train_batch_size is \"auto\" but train_micro_batch_size_per_gpu is not set; "
         "Accelerate computes the first from the second (set that to \"auto\" or a number)");
  }
  if (!train.has_value()) {
    fail(source,
         "neither train_batch_size nor train_micro_batch_size_per_gpu is set; DeepSpeed needs one "
         "(\"auto\" takes the data loader's batch size)");
  }
  // DeepSpeed derives the micro batch; it must divide exactly or its own check fails.
  if (train.value % per_micro_batch != 0) {
    fail(source, "train_batch_size " + std::to_string(train.value) +
                     " is not a multiple of gradient_accumulation_steps * world size = " + factors +
                     " = " + std::to_string(per_micro_batch));
  }
  out.train_batch_size = train.value;
  out.train_micro_batch_size_per_gpu = train.value / per_micro_batch;
  if (program.micro_batch_size && *program.micro_batch_size != out.train_micro_batch_size_per_gpu) {
    out.notes.push_back(
        source + ": train_batch_size " + std::to_string(train.value) + " gives " +
        std::to_string(out.train_micro_batch_size_per_gpu) +
        " samples per process and step, but the data loader's batch size per process is " +
        std::to_string(*program.micro_batch_size));
  }
}

void resolve_clipping(const DeepSpeedConfig& config, const ProgramValues& program,
                      ResolvedDeepSpeedConfig& out) {
  const auto& clipping = config.gradient_clipping;
  const std::string& source = config.source;
  if (clipping.is_auto()) {
    out.gradient_clipping = program.gradient_clipping.value_or(1.0);  // Accelerate's fallback
  } else if (clipping.has_value()) {
    out.gradient_clipping = clipping.value;
    if (program.gradient_clipping && *program.gradient_clipping != clipping.value) {
      out.notes.push_back(
          source + ": gradient_clipping is " +
          accelerate::detail::shortest_number_text(clipping.value) +
          " but the program's gradient clipping is " +
          accelerate::detail::shortest_number_text(*program.gradient_clipping) + "; the file's " +
          accelerate::detail::shortest_number_text(clipping.value) + " is used, as in Accelerate");
    }
  } else {
    out.gradient_clipping = 0;  // DeepSpeed's default: no clipping
    if (program.gradient_clipping) {
      out.notes.push_back(source +
                          ": gradient_clipping is not set, so gradients are not clipped although "
                          "the program's gradient clipping is " +
                          accelerate::detail::shortest_number_text(*program.gradient_clipping) +
                          " (write \"auto\" to use it)");
    }
  }
}

void resolve_zero(const DeepSpeedConfig& config, const ProgramValues& program,
                  ResolvedDeepSpeedConfig& out) {
  const ZeroSettings& zero = config.zero_optimization;
  ResolvedZero& z = out.zero_optimization;
  z.stage = zero.stage.has_value() ? zero.stage.value : zero.stage.is_auto() ? 2 : 0;
  // Accelerate derives these from the model's hidden size and refuses when it has none.
  std::string missing;
  const auto sized = [&](const AutoValue<int64_t>& v, const char* key, int64_t fallback,
                         int64_t from_hidden) {
    if (v.has_value()) return v.value;
    if (!v.is_auto()) return fallback;
    if (!program.hidden_size && program.needs_hidden_size_keys)
      missing += std::string(missing.empty() ? "" : ", ") + "zero_optimization." + key;
    return from_hidden;
  };
  const int64_t h = program.hidden_size.value_or(0);
  z.reduce_bucket_size = sized(zero.reduce_bucket_size, "reduce_bucket_size", 500000000, h * h);
  // Accelerate computes int(0.9 * h * h) in floating point, left to right.
  z.stage3_prefetch_bucket_size =
      sized(zero.stage3_prefetch_bucket_size, "stage3_prefetch_bucket_size", 50000000,
            static_cast<int64_t>(0.9 * static_cast<double>(h) * static_cast<double>(h)));
  z.stage3_param_persistence_threshold =
      sized(zero.stage3_param_persistence_threshold, "stage3_param_persistence_threshold", 100000,
            10 * h);
  if (!missing.empty()) {
    fail(config.source,
         missing +
             " \"auto\" needs the model's hidden size, which the program did not give; "
             "write numbers instead");
  }
  z.allgather_bucket_size = zero.allgather_bucket_size;
  z.allgather_partitions = zero.allgather_partitions;
  z.overlap_comm = zero.overlap_comm.value_or(z.stage == 3);
  z.contiguous_gradients = zero.contiguous_gradients;
  z.reduce_scatter = zero.reduce_scatter;
  z.round_robin_gradients = zero.round_robin_gradients;
  // "auto" devices take Accelerate's launch default, "none".
  const auto device = [](const AutoValue<OffloadDevice>& v) {
    return v.has_value() ? v.value : OffloadDevice::kNone;
  };
  z.offload_optimizer_device = device(zero.offload_optimizer.device);
  z.offload_optimizer_pin_memory = zero.offload_optimizer.pin_memory;
  z.offload_param_device = device(zero.offload_param.device);
  z.offload_param_pin_memory = zero.offload_param.pin_memory;
  z.stage3_max_live_parameters = zero.stage3_max_live_parameters;
  z.stage3_max_reuse_distance = zero.stage3_max_reuse_distance;
  z.sub_group_size = zero.sub_group_size;
  const auto& gather = zero.stage3_gather_16bit_weights_on_model_save;
  z.stage3_gather_16bit_weights_on_model_save = gather.has_value() && gather.value;
  z.zero_hpz_partition_size = zero.zero_hpz_partition_size;
  z.zero_quantized_weights = zero.zero_quantized_weights;
  z.zero_quantized_gradients = zero.zero_quantized_gradients;
}

// Fills a section's "auto" params from `fill`, which returns nullopt when the
// program does not know the value.
// What the program lacks when an "auto" param cannot be filled.
std::string words(const std::string& key) {
  if (key == "lr" || key == "warmup_max_lr") return "learning rate";
  if (key == "weight_decay") return "weight decay";
  if (key == "total_num_steps") return "total number of training steps";
  return key;  // betas, eps
}

template <class Fill>
ResolvedParamSection resolve_params(const ParamSection& section, const std::string& name,
                                    const std::string& source, Fill fill) {
  ResolvedParamSection out;
  out.type = section.type;
  for (const auto& [key, value] : section.params) {
    if (value.has_value()) {
      out.params[key] = value.value;
      continue;
    }
    std::optional<ParamValue> filled = fill(key);
    if (!filled) {
      fail(source, name + ".params." + key + " is \"auto\" but the program gave no " + words(key) +
                       "; write a value");
    }
    out.params[key] = *filled;
  }
  return out;
}

template <class T>
std::optional<ParamValue> param(const std::optional<T>& value) {
  if (!value) return std::nullopt;
  return ParamValue(*value);
}

}  // namespace

void check_mixed_precision(const DeepSpeedConfig& config, MixedPrecision mixed_precision) {
  const auto literally_true = [](const AutoValue<bool>& v) { return v.has_value() && v.value; };
  if (mixed_precision == MixedPrecision::kFP16 && literally_true(config.bf16.enabled)) {
    fail(config.source,
         "bf16.enabled is true but mixed_precision is fp16; Accelerate refuses the pair: "
         "set bf16.enabled to false or \"auto\", or mixed_precision to bf16");
  }
  if (mixed_precision == MixedPrecision::kBF16 && literally_true(config.fp16.enabled)) {
    fail(config.source,
         "fp16.enabled is true but mixed_precision is bf16; Accelerate refuses the pair: "
         "set fp16.enabled to false or \"auto\", or mixed_precision to fp16");
  }
}

// Accelerate's set_mixed_precision, then DeepSpeed's "not both" check.
// A missing section is filled from mixed_precision (Accelerate adds it); an
// "enabled": "auto" likewise; a literal true/false is the file's choice.
MixedPrecision resolve_mixed_precision(const DeepSpeedConfig& config, MixedPrecision wanted,
                                       std::vector<std::string>* notes) {
  const std::string& source = config.source;
  check_mixed_precision(config, wanted);
  const auto enabled = [&](bool present, const AutoValue<bool>& v, MixedPrecision mine) {
    if (!present || v.is_auto()) return wanted == mine;
    return v.has_value() && v.value;  // a section without "enabled": DeepSpeed's false
  };
  const bool fp16 = enabled(config.fp16.present, config.fp16.enabled, MixedPrecision::kFP16);
  const bool bf16 = enabled(config.bf16.present, config.bf16.enabled, MixedPrecision::kBF16);
  if (fp16 && bf16) {
    fail(source, "fp16.enabled and bf16.enabled are both true; DeepSpeed allows one of them");
  }
  const MixedPrecision computed = fp16   ? MixedPrecision::kFP16
                                  : bf16 ? MixedPrecision::kBF16
                                         : MixedPrecision::kNo;
  if (computed != wanted && notes != nullptr) {
    // The section that decided: the wanted one switched off, or another switched on.
    const MixedPrecision decided = wanted == MixedPrecision::kNo ? computed : wanted;
    const AutoValue<bool>& flag =
        decided == MixedPrecision::kFP16 ? config.fp16.enabled : config.bf16.enabled;
    const std::string state =
        flag.has_value() ? (flag.value ? "true" : "false") : "not set (false)";
    notes->push_back(source + ": " + to_string(decided) + ".enabled is " + state +
                     " but mixed_precision is " + to_string(wanted) +
                     "; the file wins, as in Accelerate, and the run computes in " +
                     (computed == MixedPrecision::kNo ? "fp32" : to_string(computed)));
  }
  return computed;
}

// Accelerate fills lr and weight_decay from the program's optimizer;
// betas and eps follow Transformers' Trainer, which fills them too.
ResolvedParamSection resolve_optimizer_section(const DeepSpeedConfig& config,
                                               const ProgramValues& program) {
  return resolve_params(
      config.optimizer.value(), "optimizer", config.source,
      [&](const std::string& key) -> std::optional<ParamValue> {
        if (key == "lr") return param(program.lr);
        if (key == "weight_decay") return param(program.weight_decay);
        if (key == "eps") return param(program.eps);
        if (!program.betas) return std::nullopt;  // key == "betas"
        return ParamValue(std::vector<double>(program.betas->begin(), program.betas->end()));
      });
}

// Accelerate's scheduler rules: warm up from 0 to the optimizer's lr; the
// total is in steps per process, ceil(total / processes), unless batches
// are split (then every process takes every step).
ResolvedParamSection resolve_scheduler_section(const DeepSpeedConfig& config,
                                               const ProgramValues& program) {
  return resolve_params(
      config.scheduler.value(), "scheduler", config.source,
      [&](const std::string& key) -> std::optional<ParamValue> {
        if (key == "warmup_min_lr") return ParamValue(0.0);
        if (key == "warmup_max_lr") return param(program.lr);
        if (key == "warmup_num_steps")
          return ParamValue(static_cast<double>(program.warmup_num_steps));
        if (!program.total_num_steps) return std::nullopt;  // key == "total_num_steps"
        const int64_t total = *program.total_num_steps;
        const int64_t steps =
            program.split_batches ? total : (total + program.world_size - 1) / program.world_size;
        return ParamValue(static_cast<double>(steps));
      });
}

ResolvedDeepSpeedConfig resolve(const DeepSpeedConfig& config, const ProgramValues& program) {
  check_program(program);
  ResolvedDeepSpeedConfig out;
  out.source = config.source;
  out.ignored_keys = config.ignored_keys;
  resolve_precision(config, program, out);
  resolve_batch(config, program, out);
  resolve_clipping(config, program, out);
  resolve_zero(config, program, out);
  if (config.optimizer) out.optimizer = resolve_optimizer_section(config, program);
  if (config.scheduler) out.scheduler = resolve_scheduler_section(config, program);
  return out;
}

}  // namespace accelerate::sharding
