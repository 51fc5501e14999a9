// The declarations of settings.h. A new setting is one entry here, one line
// in all(), and a row in docs/launching.md's table.
#include "common/settings.h"

#include <algorithm>
#include <cctype>

#include "accelerate/common/errors.h"
#include "accelerate/common/job_state.h"
#include "accelerate/detail/enum_names.h"
#include "common/environment_text.h"

namespace accelerate::settings {
namespace {

using std::chrono::milliseconds;

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::optional<int> parse_restart_count(std::string_view text) {
  const auto value = detail::parse_integer_in(text, 0, kMaxCount);
  return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
}

std::optional<int> parse_zero_stage(std::string_view text) {
  const auto value = detail::parse_integer_in(text, 0, 3);
  return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
}

std::optional<int> parse_fsdp_version(std::string_view text) {
  const auto value = detail::parse_integer_in(text, 1, 2);
  return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
}

std::optional<std::string> parse_path(std::string_view text) {
  return text.empty() ? std::nullopt : std::optional<std::string>(text);
}

// DeepSpeed's devices, any case (Accelerate's launcher lowercases them).
// "nvme" is refused like any other word: the expectation says why.
std::optional<OffloadDevice> parse_offload_device(std::string_view text) {
  return detail::parse_enum(detail::kOffloadDeviceNames, text, detail::NameCase::kAnyCase);
}

// FSDP 1 takes a sharding strategy here, FSDP 2 a boolean (Accelerate's
// FullyShardedDataParallelPlugin); which one applies depends on
// FSDP_VERSION, so both are kept, as the strategy's name or "true"/"false".
std::optional<std::string> parse_reshard_after_forward(std::string_view text) {
  if (auto strategy = parse_fsdp_sharding_strategy(text)) return std::string(to_string(*strategy));
  if (auto flag = parse_bool(text)) return std::string(*flag ? "true" : "false");
  return std::nullopt;
}

// The enums of fsdp_plugin.h: the name in any case (Accelerate upper-cases
// it) or, where PyTorch numbers the value, the number (the tables' aliases).
std::optional<FsdpAutoWrapPolicy> parse_auto_wrap_policy(std::string_view text) {
  return detail::parse_enum(detail::kFsdpAutoWrapPolicyNames, text, detail::NameCase::kAnyCase);
}

std::optional<FsdpBackwardPrefetch> parse_backward_prefetch(std::string_view text) {
  return detail::parse_enum(detail::kFsdpBackwardPrefetchNames, text, detail::NameCase::kAnyCase);
}

std::optional<FsdpStateDictType> parse_state_dict_type(std::string_view text) {
  return detail::parse_enum(detail::kFsdpStateDictTypeNames, text, detail::NameCase::kAnyCase);
}

// 0 is allowed: Accelerate then drops SIZE_BASED_WRAP (no units).
std::optional<int64_t> parse_min_num_params(std::string_view text) {
  const auto value = detail::parse_integer_in(text, 0, 1000000000000000000LL);
  return value ? std::optional<int64_t>(*value) : std::nullopt;
}

// Comma-separated class names; at least one name.
std::optional<std::string> parse_class_names(std::string_view text) {
  if (text.find_first_not_of(", \t") == std::string_view::npos) return std::nullopt;
  return std::string(text);
}

// OpenMP's two wait policies, any case (as OpenMP runtimes accept them).
std::optional<std::string> parse_wait_policy(std::string_view text) {
  const std::string word = lower(text);
  if (word == "active") return std::string("ACTIVE");
  if (word == "passive") return std::string("PASSIVE");
  return std::nullopt;
}

std::optional<double> parse_gradient_clipping(std::string_view text) {
  return detail::parse_non_negative_number(text);
}

// At least 1 ms: a zero timeout would fail every collective at once.
std::optional<milliseconds> parse_timeout(std::string_view text) {
  const auto millis = detail::parse_seconds_as_milliseconds(text);
  if (!millis || *millis < 1) return std::nullopt;
  return milliseconds(*millis);
}

// As Accelerate's launcher writes it (str() of a Python float): "1.0".
std::string format_number(const double& value) { return detail::python_float_text(value); }
std::string format_offload_device(const OffloadDevice& value) { return to_string(value); }
std::string format_fsdp_sharding_strategy(const FsdpShardingStrategy& value) {
  return to_string(value);
}
std::string format_int64(const int64_t& value) { return std::to_string(value); }
std::string format_auto_wrap_policy(const FsdpAutoWrapPolicy& value) { return to_string(value); }
std::string format_backward_prefetch(const FsdpBackwardPrefetch& value) { return to_string(value); }
std::string format_state_dict_type(const FsdpStateDictType& value) { return to_string(value); }
std::string format_mixed_precision(const MixedPrecision& value) { return to_string(value); }
std::string format_log_level(const LogLevel& value) { return to_string(value); }
// Whole seconds when exact, else seconds with the milliseconds ("2.5").
std::string format_timeout(const milliseconds& value) {
  const long long ms = value.count();
  std::string text = std::to_string(ms / 1000);
  if (ms % 1000 != 0) {
    std::string fraction = std::to_string(1000 + ms % 1000).substr(1);
    while (fraction.back() == '0') fraction.pop_back();
    text += "." + fraction;
  }
  return text;
}

constexpr const char* kOffloadExpectation =
    "none or cpu (nvme offloading is not supported by accelerate-cpp)";

}  // namespace

std::optional<int> parse_count(std::string_view text) {
  const auto value = detail::parse_integer_in(text, 1, kMaxCount);
  return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
}
// OpenBLAS's own range for OPENBLAS_THREAD_TIMEOUT (it clamps others into it).
std::optional<int> parse_thread_timeout(std::string_view text) {
  const auto value = detail::parse_integer_in(text, 4, 30);
  return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
}
std::string format_int(const int& value) { return std::to_string(value); }
std::string format_bool(const bool& value) { return value ? "true" : "false"; }
std::string format_text(const std::string& value) { return value; }

std::string bad_value_message(std::string_view subject, std::string_view expected,
                              std::string_view text) {
  return std::string(subject) + " expects " + std::string(expected) + ", got '" +
         detail::printable(text) + "'";
}

std::string count_expectation() { return kCountExpectation; }

std::optional<FsdpShardingStrategy> parse_fsdp_sharding_strategy(std::string_view text) {
  return detail::parse_enum(detail::kFsdpShardingStrategyNames, text, detail::NameCase::kAnyCase);
}

std::optional<bool> parse_bool(std::string_view text) {
  const std::string word = lower(text);
  if (word == "1" || word == "true" || word == "yes") return true;
  if (word == "0" || word == "false" || word == "no") return false;
  return std::nullopt;
}

template <class T>
T Setting<T>::parse(std::string_view subject, std::string_view text) const {
  if (auto value = try_parse(text)) return *value;
  throw ConfigError(problem(subject, text));
}

template <class T>
std::optional<T> Setting<T>::read(const SettingValues& values) const {
  const auto given = values.find(about.variable);
  if (!given) return std::nullopt;
  return parse(given->origin.subject(), given->text);
}

template <class T>
std::optional<Origin> Setting<T>::origin(const SettingValues& values) const {
  auto given = values.find(about.variable);
  if (!given) return std::nullopt;
  return std::move(given->origin);
}

template struct Setting<MixedPrecision>;
template struct Setting<int>;
template struct Setting<bool>;
template struct Setting<milliseconds>;
template struct Setting<LogLevel>;
template struct Setting<std::string>;
template struct Setting<double>;
template struct Setting<OffloadDevice>;
template struct Setting<FsdpShardingStrategy>;
template struct Setting<FsdpAutoWrapPolicy>;
template struct Setting<int64_t>;
template struct Setting<FsdpBackwardPrefetch>;
template struct Setting<FsdpStateDictType>;
template struct Setting<CpuCapability>;

const Setting<MixedPrecision> kMixedPrecision{
    {"ACCELERATE_MIXED_PRECISION", "--mixed_precision / mixed_precision", "one of no, bf16, fp16",
     "no", "compute in bf16 or fp16 (autocast; fp16 adds loss scaling and needs CUDA)"},
    MixedPrecision::kNo,
    parse_mixed_precision,
    format_mixed_precision};

const Setting<int> kGradientAccumulationSteps{
    {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "--gradient_accumulation_steps", kCountExpectation,
     "1", "micro-batches per optimizer step"},
    1,
    parse_count,
    format_int};

const Setting<bool> kUseCpu{{"ACCELERATE_USE_CPU", "--cpu / use_cpu", kBoolExpectation, "false",
                             "run on the CPU even where CUDA devices are visible"},
                            false,
                            parse_bool,
                            format_bool};

const Setting<bool> kDebugMode{
    {"ACCELERATE_DEBUG_MODE", "--debug / debug", kBoolExpectation, "false",
     "check shapes and dtypes across ranks before every collective"},
    false,
    parse_bool,
    format_bool};

const Setting<bool> kUseDeepSpeed{
    {"ACCELERATE_USE_DEEPSPEED", "--use_deepspeed / distributed_type: DEEPSPEED", kBoolExpectation,
     "false", "shard the training state with ZeRO (DeepSpeedPlugin), set by the variables below"},
    false,
    parse_bool,
    format_bool};

const Setting<int> kZeroStage{{"ACCELERATE_DEEPSPEED_ZERO_STAGE",
                               "--zero_stage / deepspeed_config.zero_stage", "0, 1, 2 or 3", "2",
                               "ZeRO stage: 1 shards the optimizer state, 2 the gradients too, 3 "
                               "the parameters too (0: data parallelism)"},
                              2,
                              parse_zero_stage,
                              format_int};

const Setting<std::string> kDeepSpeedConfigFile{
    {"ACCELERATE_DEEPSPEED_CONFIG_FILE",
     "--deepspeed_config_file / deepspeed_config.deepspeed_config_file",
     "a DeepSpeed JSON config file (none: no file)", "none",
     "DeepSpeed JSON config file, whose values win over the other DeepSpeed settings "
     "(docs/deepspeed-config.md)"},
    "none",
    parse_path,
    format_text};

const Setting<double> kGradientClipping{
    {"ACCELERATE_GRADIENT_CLIPPING", "--gradient_clipping / deepspeed_config.gradient_clipping",
     "a number >= 0 (e.g. 1.0)", "not set (1.0, Accelerate's \"auto\")",
     "clip the gradients to this global norm (DeepSpeed)"},
    0.0,
    parse_gradient_clipping,
    format_number};

const Setting<OffloadDevice> kOffloadOptimizerDevice{
    {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
     "--offload_optimizer_device / deepspeed_config.offload_optimizer_device", kOffloadExpectation,
     "none", "where ZeRO keeps the optimizer state: in CPU memory (cpu) or on the device (none)"},
    OffloadDevice::kNone,
    parse_offload_device,
    format_offload_device};

const Setting<OffloadDevice> kOffloadParamDevice{
    {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE",
     "--offload_param_device / deepspeed_config.offload_param_device", kOffloadExpectation, "none",
     "where ZeRO stage 3 keeps the parameters: in CPU memory (cpu) or on the device (none)"},
    OffloadDevice::kNone,
    parse_offload_device,
    format_offload_device};

const Setting<bool> kZero3Init{
    {"ACCELERATE_DEEPSPEED_ZERO3_INIT", "--zero3_init_flag / deepspeed_config.zero3_init_flag",
     kBoolExpectation, "true at stage 3, else false",
     "construct the model sharded (DeepSpeed's zero.Init; stage 3 only)"},
    false,
    parse_bool,
    format_bool};

const Setting<bool> kZero3Save16BitModel{
    {"ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
     "--zero3_save_16bit_model / deepspeed_config.zero3_save_16bit_model", kBoolExpectation,
     "false", "gather 16-bit weights when saving the model (stage 3 only)"},
    false,
    parse_bool,
    format_bool};

const Setting<bool> kUseFsdp{
    {"ACCELERATE_USE_FSDP", "--use_fsdp / distributed_type: FSDP", kBoolExpectation, "false",
     "shard the training state with ZeRO, chosen by FSDP's names (set by the FSDP_* variables)"},
    false,
    parse_bool,
    format_bool};

const Setting<FsdpShardingStrategy> kFsdpShardingStrategy{
    {"FSDP_SHARDING_STRATEGY", "--fsdp_sharding_strategy / fsdp_config.fsdp_sharding_strategy",
     "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2 (or 1-5)",
     "FULL_SHARD",
     "FULL_SHARD is ZeRO stage 3, SHARD_GRAD_OP stage 2, NO_SHARD stage 0; HYBRID_SHARD and "
     "HYBRID_SHARD_ZERO2 are stages 3 and 2 within each machine, replicated across machines"},
    FsdpShardingStrategy::kFullShard,
    parse_fsdp_sharding_strategy,
    format_fsdp_sharding_strategy};

const Setting<std::string> kFsdpReshardAfterForward{
    {"FSDP_RESHARD_AFTER_FORWARD",
     "--fsdp_reshard_after_forward / fsdp_config.fsdp_reshard_after_forward",
     "a sharding strategy as for FSDP_SHARDING_STRATEGY (FSDP 1), or true or false (FSDP 2)",
     "FULL_SHARD (FSDP 1), true (FSDP 2)",
     "the strategy when FSDP_SHARDING_STRATEGY is not set; FSDP 2: false is SHARD_GRAD_OP, true "
     "FULL_SHARD"},
    "FULL_SHARD",
    parse_reshard_after_forward,
    format_text};

const Setting<int> kFsdpVersion{
    {"FSDP_VERSION", "--fsdp_version / fsdp_config.fsdp_version", "1 or 2", "1",
     "which of FSDP's spellings FSDP_RESHARD_AFTER_FORWARD uses"},
    1,
    parse_fsdp_version,
    format_int};

const Setting<FsdpAutoWrapPolicy> kFsdpAutoWrapPolicy{
    {"FSDP_AUTO_WRAP_POLICY", "--fsdp_auto_wrap_policy / fsdp_config.fsdp_auto_wrap_policy",
     "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP", "NO_WRAP",
     "which modules are ZeRO stage 3's units (FULL_SHARD)"},
    FsdpAutoWrapPolicy::kNoWrap,
    parse_auto_wrap_policy,
    format_auto_wrap_policy};

const Setting<std::string> kFsdpTransformerClsToWrap{
    {"FSDP_TRANSFORMER_CLS_TO_WRAP",
     "--fsdp_transformer_layer_cls_to_wrap / fsdp_config.fsdp_transformer_layer_cls_to_wrap",
     "class names separated by commas (e.g. Block or Block,Mlp)", "none",
     "TRANSFORMER_BASED_WRAP: the classes whose modules are units"},
    "",
    parse_class_names,
    format_text};

// Accelerate's launcher always passes --fsdp_min_num_params's 1e8; ours
// passes what was given, so the ranks fall back to the same number.
const Setting<int64_t> kFsdpMinNumParams{
    {"FSDP_MIN_NUM_PARAMS", "--fsdp_min_num_params / fsdp_config.fsdp_min_num_params",
     "a whole number of 0 or more", "100000000",
     "SIZE_BASED_WRAP: the parameter elements that make a module a unit (0: no units)"},
    100000000,
    parse_min_num_params,
    format_int64};

const Setting<FsdpBackwardPrefetch> kFsdpBackwardPrefetch{
    {"FSDP_BACKWARD_PREFETCH", "--fsdp_backward_prefetch / fsdp_config.fsdp_backward_prefetch",
     "BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH", "NO_PREFETCH",
     "FSDP 1 FULL_SHARD: a unit's backward starts the previous unit's gather (NO_PREFETCH: one "
     "unit at a time, its reduce-scatter finished first)"},
    FsdpBackwardPrefetch::kNoPrefetch,
    parse_backward_prefetch,
    format_backward_prefetch};

const Setting<bool> kFsdpForwardPrefetch{
    {"FSDP_FORWARD_PREFETCH", "--fsdp_forward_prefetch / fsdp_config.fsdp_forward_prefetch",
     kBoolExpectation, "false",
     "FSDP 1 FULL_SHARD: a unit's forward starts the next unit's gather"},
    false,
    parse_bool,
    format_bool};

const Setting<bool> kFsdpOffloadParams{
    {"FSDP_OFFLOAD_PARAMS", "--fsdp_offload_params / fsdp_config.fsdp_offload_params",
     kBoolExpectation, "false",
     "keep parameters, gradients and the optimizer step in CPU memory (a CUDA job; nothing to "
     "do on CPU)"},
    false,
    parse_bool,
    format_bool};

const Setting<FsdpStateDictType> kFsdpStateDictType{
    {"FSDP_STATE_DICT_TYPE", "--fsdp_state_dict_type / fsdp_config.fsdp_state_dict_type",
     "FULL_STATE_DICT, LOCAL_STATE_DICT or SHARDED_STATE_DICT (or 1-3)",
     "FULL_STATE_DICT (FSDP 1), SHARDED_STATE_DICT (FSDP 2)",
     "with FULL_SHARD: save_state writes the model whole (FULL_STATE_DICT) or as each "
     "process's pieces (the others)"},
    FsdpStateDictType::kFullStateDict,
    parse_state_dict_type,
    format_state_dict_type};

const Setting<bool> kFsdpCpuRamEfficientLoading{
    {"FSDP_CPU_RAM_EFFICIENT_LOADING",
     "--fsdp_cpu_ram_efficient_loading / fsdp_config.fsdp_cpu_ram_efficient_loading",
     kBoolExpectation, "false",
     "with FULL_SHARD, accelerator.zero3_init() builds the model without memory on every process "
     "but the main one; prepare() gives each process its shard of the main process's weights"},
    false,
    parse_bool,
    format_bool};

const Setting<bool> kFsdpSyncModuleStates{
    {"FSDP_SYNC_MODULE_STATES", "--fsdp_sync_module_states / fsdp_config.fsdp_sync_module_states",
     kBoolExpectation, "true",
     "accepted (prepare() always starts from the main process's weights); false needs "
     "FSDP_CPU_RAM_EFFICIENT_LOADING false"},
    true,
    parse_bool,
    format_bool};

const Setting<milliseconds> kTimeout{
    {"ACCELERATE_TIMEOUT", "--rdzv_conf timeout=SECONDS",
     "a positive number of seconds (e.g. 300 or 2.5)", "300",
     "how long rendezvous and each collective wait for the slowest rank"},
    kDefaultTimeout,
    parse_timeout,
    format_timeout};

const Setting<LogLevel> kLogLevel{
    {"ACCELERATE_LOG_LEVEL", "", "a log level (DEBUG, INFO, WARNING, ERROR or CRITICAL)", "INFO",
     "the lowest level get_logger() prints"},
    LogLevel::kInfo,
    parse_log_level,
    format_log_level};

const Setting<bool> kSharedMemoryAllReduce{
    {"ACCELERATE_SHARED_MEMORY_ALLREDUCE", "", kBoolExpectation, "true",
     "sum CPU tensors through shared memory when every rank is on this machine"},
    true,
    parse_bool,
    format_bool};

const Setting<bool> kOffloadOnCpuJob{
    {"ACCELERATE_OFFLOAD_ON_CPU_JOB", "", kBoolExpectation, "false",
     "a CPU-only job runs CPU offloading's copies anyway (host copies of the shards, the "
     "optimizer stepping them): the offload path, tested without a GPU; results are the same"},
    false,
    parse_bool,
    format_bool};

const Setting<std::string> kProgressTty{
    {"ACCELERATE_PROGRESS_TTY", "", "a terminal's device path", "unset",
     "the terminal where the local main process draws its progress bars when its own stderr "
     "is a pipe (accelerate launch sets it when its stderr is a terminal)"},
    "",
    parse_path,
    format_text};

const Setting<int> kRestartCount{
    {"ACCELERATE_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT", "a whole number from 0 to 1000000",
     "0", "how often the launcher restarted the local processes (resume when > 0)"},
    0,
    parse_restart_count,
    format_int};

const Setting<int> kOmpNumThreads{
    {"OMP_NUM_THREADS", "--num_cpu_threads_per_process", kCountExpectation,
     "cores / local processes", "intra-op threads of each process (LibTorch's OpenMP pool)"},
    1,
    parse_count,
    format_int};

const Setting<int> kOpenblasNumThreads{
    {"OPENBLAS_NUM_THREADS", "--num_cpu_threads_per_process", kCountExpectation, "1",
     "OpenBLAS's own thread pool, beside LibTorch's OpenMP pool"},
    1,
    parse_count,
    format_int};

const Setting<std::string> kOmpWaitPolicy{
    {"OMP_WAIT_POLICY", "", "ACTIVE or PASSIVE", "PASSIVE (the launcher's)",
     "whether OpenMP's idle threads spin (ACTIVE) or sleep (PASSIVE)"},
    "PASSIVE",
    parse_wait_policy,
    format_text};

const Setting<int> kOpenblasThreadTimeout{
    {"OPENBLAS_THREAD_TIMEOUT", "", "a whole number n from 4 to 30", "4 (the launcher's)",
     "OpenBLAS's idle workers spin 2^n CPU cycles after a call before they sleep"},
    4,
    parse_thread_timeout,
    format_int};

}  // namespace accelerate::settings
