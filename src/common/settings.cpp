// The declarations of settings.h. A new setting is one entry here, one line
// in all(), and a row in docs/launching.md's table.
#include "common/settings.h"

#include <algorithm>
#include <cctype>

#include "accelerate/errors.h"
#include "accelerate/job_state.h"
#include "common/environment_text.h"

namespace accelerate::settings {
namespace {

using std::chrono::milliseconds;

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::optional<int> parse_count(std::string_view text) {
  const auto value = detail::parse_integer_in(text, 1, kMaxCount);
  return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
}

std::optional<int> parse_restart_count(std::string_view text) {
  const auto value = detail::parse_integer_in(text, 0, kMaxCount);
  return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
}

// OpenMP's two wait policies, any case (as OpenMP runtimes accept them).
std::optional<std::string> parse_wait_policy(std::string_view text) {
  const std::string word = lower(text);
  if (word == "active") return std::string("ACTIVE");
  if (word == "passive") return std::string("PASSIVE");
  return std::nullopt;
}

// At least 1 ms: a zero timeout would fail every collective at once.
std::optional<milliseconds> parse_timeout(std::string_view text) {
  const auto millis = detail::parse_seconds_as_milliseconds(text);
  if (!millis || *millis < 1) return std::nullopt;
  return milliseconds(*millis);
}

std::string format_int(const int& value) { return std::to_string(value); }
std::string format_text(const std::string& value) { return value; }
std::string format_bool(const bool& value) { return value ? "true" : "false"; }
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

constexpr const char* kCountExpectation = "a whole number from 1 to 1000000";
constexpr const char* kBoolExpectation = "true or false (or 1/0, yes/no)";

}  // namespace

std::string bad_value_message(std::string_view subject, std::string_view expected, std::string_view text) {
  return std::string(subject) + " expects " + std::string(expected) + ", got '" + detail::printable(text) + "'";
}

std::string count_expectation() { return kCountExpectation; }

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
std::optional<T> Setting<T>::read(const Environment& env) const {
  const auto text = lookup(env, about.variable);
  if (!text) return std::nullopt;
  return parse(about.variable, *text);
}

template struct Setting<MixedPrecision>;
template struct Setting<int>;
template struct Setting<bool>;
template struct Setting<milliseconds>;
template struct Setting<LogLevel>;
template struct Setting<std::string>;

const Setting<MixedPrecision> kMixedPrecision{
    {"ACCELERATE_MIXED_PRECISION", "--mixed_precision / mixed_precision", "one of no, bf16, fp16", "no",
     "compute in bf16 or fp16 (autocast; fp16 adds loss scaling and needs CUDA)"},
    MixedPrecision::kNo, parse_mixed_precision, format_mixed_precision};

const Setting<int> kGradientAccumulationSteps{
    {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "--gradient_accumulation_steps", kCountExpectation, "1",
     "micro-batches per optimizer step"},
    1, parse_count, format_int};

const Setting<bool> kUseCpu{
    {"ACCELERATE_USE_CPU", "--cpu / use_cpu", kBoolExpectation, "false",
     "run on the CPU even where CUDA devices are visible"},
    false, parse_bool, format_bool};

const Setting<bool> kDebugMode{
    {"ACCELERATE_DEBUG_MODE", "--debug / debug", kBoolExpectation, "false",
     "check shapes and dtypes across ranks before every collective"},
    false, parse_bool, format_bool};

const Setting<milliseconds> kTimeout{
    {"ACCELERATE_TIMEOUT", "--rdzv_conf timeout=SECONDS", "a positive number of seconds (e.g. 300 or 2.5)",
     "300", "how long rendezvous and each collective wait for the slowest rank"},
    kDefaultTimeout, parse_timeout, format_timeout};

const Setting<LogLevel> kLogLevel{
    {"ACCELERATE_LOG_LEVEL", "", "a log level (DEBUG, INFO, WARNING, ERROR or CRITICAL)", "INFO",
     "the lowest level get_logger() prints"},
    LogLevel::kInfo, parse_log_level, format_log_level};

const Setting<bool> kSharedMemoryAllReduce{
    {"ACCELERATE_SHARED_MEMORY_ALLREDUCE", "", kBoolExpectation, "true",
     "sum CPU tensors through shared memory when every rank is on this machine"},
    true, parse_bool, format_bool};

const Setting<int> kRestartCount{
    {"ACCELERATE_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT", "a whole number from 0 to 1000000", "0",
     "how often the launcher restarted the local processes (resume when > 0)"},
    0, parse_restart_count, format_int};

const Setting<int> kOmpNumThreads{
    {"OMP_NUM_THREADS", "--num_cpu_threads_per_process", kCountExpectation, "cores / local processes",
     "intra-op threads of each process (LibTorch's OpenMP pool)"},
    1, parse_count, format_int};

const Setting<int> kOpenblasNumThreads{
    {"OPENBLAS_NUM_THREADS", "--num_cpu_threads_per_process", kCountExpectation, "1",
     "OpenBLAS's own thread pool, beside LibTorch's OpenMP pool"},
    1, parse_count, format_int};

const Setting<std::string> kOmpWaitPolicy{
    {"OMP_WAIT_POLICY", "", "ACTIVE or PASSIVE", "PASSIVE (the launcher's)",
     "whether OpenMP's idle threads spin (ACTIVE) or sleep (PASSIVE)"},
    "PASSIVE", parse_wait_policy, format_text};

const std::vector<Description>& all() {
  static const std::vector<Description> descriptions = {
      kMixedPrecision.about, kGradientAccumulationSteps.about, kUseCpu.about,
      kDebugMode.about,      kTimeout.about,                   kLogLevel.about,
      kSharedMemoryAllReduce.about, kRestartCount.about,       kOmpNumThreads.about,
      kOpenblasNumThreads.about, kOmpWaitPolicy.about};
  return descriptions;
}

}  // namespace accelerate::settings
