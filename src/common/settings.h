// The settings contract between `accelerate launch` and the training process.
//
// A setting travels config file -> flag -> launcher -> child environment ->
// library. Each one is declared here once: its variable, how Hugging Face
// spells it, its type, default and parser. The launcher writes through these
// declarations, the library reads through them, and a flag or config key that
// sets the same value parses with the same rules, so every bad value reads
//   <where it was written> expects <what is valid>, got '<value>'
// whichever door it came in by. No other file names an ACCELERATE_* variable.
// docs/launching.md has the table for users.
//
// LibTorch-free: the command line links this.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accelerate/common/cpu_capability.h"
#include "accelerate/common/environment.h"
#include "accelerate/common/log_level.h"
#include "accelerate/common/mixed_precision.h"
#include "accelerate/sharding/deepspeed_plugin.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "common/setting_values.h"

namespace accelerate::settings {

// What a setting is, in words: for error messages, docs and `accelerate env`.
struct Description {
  const char* variable;      // ACCELERATE_MIXED_PRECISION
  const char* hf_spelling;   // "--mixed_precision / mixed_precision", or "" (ours alone)
  const char* expected;      // completes "expects ...": "one of no, bf16, fp16"
  const char* default_text;  // "no"
  const char* meaning;       // one line
};

// The one error format: "<subject> expects <expected>, got '<text>'", with
// the text made printable (a stray newline must not break the line).
std::string bad_value_message(std::string_view subject, std::string_view expected,
                              std::string_view text);

template <class T>
struct Setting {
  Description about;
  T fallback;  // when nothing sets it
  std::optional<T> (*parse_text)(std::string_view text);
  std::string (*format_text)(const T& value);

  const char* variable() const { return about.variable; }
  // `text` written under `subject` (this variable, a flag, a config key):
  // the value, or nullopt; problem() is the message for a nullopt.
  std::optional<T> try_parse(std::string_view text) const { return parse_text(text); }
  std::string problem(std::string_view subject, std::string_view text) const {
    return bad_value_message(subject, about.expected, text);
  }
  // try_parse that throws ConfigError(problem(subject, text)).
  T parse(std::string_view subject, std::string_view text) const;
  // The value in `env`: nullopt when unset or empty; ConfigError naming the
  // variable and the value when it does not parse.
  std::optional<T> read(const Environment& env) const { return read(EnvironmentValues(env)); }
  T read_or_default(const Environment& env) const { return read(env).value_or(fallback); }
  // The value `values` give for this setting: nullopt when none; ConfigError
  // naming where it was written (Origin::subject) when it does not parse.
  std::optional<T> read(const SettingValues& values) const;
  T read_or_default(const SettingValues& values) const { return read(values).value_or(fallback); }
  // Where `values` give this setting, when they do.
  std::optional<Origin> origin(const SettingValues& values) const;
  std::string format(const T& value) const { return format_text(value); }
  void write(Environment& env, const T& value) const { env[about.variable] = format_text(value); }
};

// FSDP's sharding strategies (accelerate/sharding/fsdp_plugin.h, with to_string):
// FSDP_SHARDING_STRATEGY may be written as the name (any case) or the number.
using FsdpShardingStrategy = accelerate::FsdpShardingStrategy;
std::optional<FsdpShardingStrategy> parse_fsdp_sharding_strategy(std::string_view text);

// ---- What the launcher tells the program (Accelerate's names) -------------
extern const Setting<MixedPrecision> kMixedPrecision;  // ACCELERATE_MIXED_PRECISION
extern const Setting<int> kGradientAccumulationSteps;  // ACCELERATE_GRADIENT_ACCUMULATION_STEPS
extern const Setting<bool> kUseCpu;                    // ACCELERATE_USE_CPU
extern const Setting<bool> kDebugMode;                 // ACCELERATE_DEBUG_MODE
// ---- Sharded training: DeepSpeed's ZeRO, or FSDP's names for it ------------
// (read by deepspeed_plugin_from_environment, src/sharding/plugin_from_environment.h)
extern const Setting<bool> kUseDeepSpeed;                // ACCELERATE_USE_DEEPSPEED
extern const Setting<int> kZeroStage;                    // ACCELERATE_DEEPSPEED_ZERO_STAGE
extern const Setting<std::string> kDeepSpeedConfigFile;  // ACCELERATE_DEEPSPEED_CONFIG_FILE
extern const Setting<double> kGradientClipping;          // ACCELERATE_GRADIENT_CLIPPING
extern const Setting<OffloadDevice>
    kOffloadOptimizerDevice;  // ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE
extern const Setting<OffloadDevice>
    kOffloadParamDevice;                          // ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE
extern const Setting<bool> kZero3Init;            // ACCELERATE_DEEPSPEED_ZERO3_INIT
extern const Setting<bool> kZero3Save16BitModel;  // ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL
extern const Setting<bool> kUseFsdp;              // ACCELERATE_USE_FSDP
extern const Setting<FsdpShardingStrategy> kFsdpShardingStrategy;  // FSDP_SHARDING_STRATEGY
extern const Setting<std::string> kFsdpReshardAfterForward;        // FSDP_RESHARD_AFTER_FORWARD
extern const Setting<int> kFsdpVersion;                            // FSDP_VERSION
// FULL_SHARD's units (stage 3), and what FSDP tunes that is accepted here.
extern const Setting<FsdpAutoWrapPolicy> kFsdpAutoWrapPolicy;      // FSDP_AUTO_WRAP_POLICY
extern const Setting<std::string> kFsdpTransformerClsToWrap;       // FSDP_TRANSFORMER_CLS_TO_WRAP
extern const Setting<int64_t> kFsdpMinNumParams;                   // FSDP_MIN_NUM_PARAMS
extern const Setting<FsdpBackwardPrefetch> kFsdpBackwardPrefetch;  // FSDP_BACKWARD_PREFETCH
extern const Setting<bool> kFsdpForwardPrefetch;                   // FSDP_FORWARD_PREFETCH
extern const Setting<bool> kFsdpOffloadParams;                     // FSDP_OFFLOAD_PARAMS
extern const Setting<FsdpStateDictType> kFsdpStateDictType;        // FSDP_STATE_DICT_TYPE
extern const Setting<bool> kFsdpCpuRamEfficientLoading;            // FSDP_CPU_RAM_EFFICIENT_LOADING
extern const Setting<bool> kFsdpSyncModuleStates;                  // FSDP_SYNC_MODULE_STATES
// ---- Ours ------------------------------------------------------------------
extern const Setting<std::chrono::milliseconds> kTimeout;  // ACCELERATE_TIMEOUT (seconds)
extern const Setting<LogLevel> kLogLevel;                  // ACCELERATE_LOG_LEVEL
extern const Setting<bool> kSharedMemoryAllReduce;         // ACCELERATE_SHARED_MEMORY_ALLREDUCE
extern const Setting<bool> kOffloadOnCpuJob;               // ACCELERATE_OFFLOAD_ON_CPU_JOB
extern const Setting<std::string> kProgressTty;            // ACCELERATE_PROGRESS_TTY
extern const Setting<int> kRestartCount;                   // ACCELERATE_RESTART_COUNT
// ---- Threads (read by OpenMP and OpenBLAS themselves, and by the library) --
extern const Setting<int> kOmpNumThreads;          // OMP_NUM_THREADS
extern const Setting<int> kOpenblasNumThreads;     // OPENBLAS_NUM_THREADS
extern const Setting<std::string> kOmpWaitPolicy;  // OMP_WAIT_POLICY
extern const Setting<int> kOpenblasThreadTimeout;  // OPENBLAS_THREAD_TIMEOUT
// ---- Kernels (kernel_settings.cpp) ----------------------------------------
extern const Setting<std::string> kOpenblasCoretype;  // OPENBLAS_CORETYPE, read by OpenBLAS
extern const Setting<CpuCapability> kCpuCapability;   // ACCELERATE_CPU_CAPABILITY

// ---- Parallelism sizes (Accelerate 1.x's ParallelismConfig) ---------------
// (parallelism_settings.cpp; read by resolve_sharding_settings)
extern const Setting<bool> kUseParallelismConfig;         // ACCELERATE_USE_PARALLELISM_CONFIG
extern const Setting<int> kParallelismDpReplicateSize;    // PARALLELISM_CONFIG_DP_REPLICATE_SIZE
extern const Setting<int> kParallelismDpShardSize;        // PARALLELISM_CONFIG_DP_SHARD_SIZE
extern const Setting<int> kParallelismSpSize;             // PARALLELISM_CONFIG_SP_SIZE
extern const Setting<std::string> kParallelismSpBackend;  // PARALLELISM_CONFIG_SP_BACKEND
extern const Setting<int> kParallelismTpSize;             // PARALLELISM_CONFIG_TP_SIZE
extern const Setting<bool>
    kParallelismTpSequenceParallel;            // PARALLELISM_CONFIG_TP_SEQUENCE_PARALLEL
extern const Setting<int> kParallelismCpSize;  // PARALLELISM_CONFIG_CP_SIZE

// Every setting above, in that order.
const std::vector<Description>& all();

// Whole numbers from 1 to this: gradient accumulation steps, thread counts,
// process counts (a million is far beyond any real job, and keeps products
// of two such numbers within 64 bits).
constexpr long long kMaxCount = 1000000;
// "a whole number from 1 to 1000000", as the messages say it.
std::string count_expectation();

// Booleans as Accelerate's environment writes and reads them: true/false,
// 1/0, yes/no, any case.
std::optional<bool> parse_bool(std::string_view text);
// For the files that define settings: counts (1 to kMaxCount) and the
// texts the launcher writes for ints and booleans.
std::optional<int> parse_count(std::string_view text);
std::string format_int(const int& value);
std::string format_bool(const bool& value);
std::string format_text(const std::string& value);  // the text itself
constexpr const char* kCountExpectation = "a whole number from 1 to 1000000";
constexpr const char* kBoolExpectation = "true or false (or 1/0, yes/no)";

}  // namespace accelerate::settings
