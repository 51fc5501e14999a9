// The rows of `accelerate launch`'s flag table (launch_options.h). Each row
// parses and checks its own value, so a flag and a config-file key that goes
// through the same row fail with the same message.
#include <set>
#include <sstream>
#include <type_traits>

#include "common/environment_text.h"
#include "common/settings.h"
#include "launcher/launch_errors.h"
#include "launcher/launch_options.h"

namespace accelerate::launcher {
namespace {

using Options = LaunchOptions;
using Text = const std::string&;

// Parses a whole decimal number in [min, max]; `expectation` completes the
// sentence "--flag expects ...".
int parse_int(Text spelled, Text value, long min, long max, Text expectation) {
  const auto number = detail::parse_integer_in(value, min, max);
  if (!number) throw UsageError(settings::bad_value_message(spelled, expectation, value));
  return static_cast<int>(*number);
}

// A value that the settings contract declares: the same rules and message
// as when the program reads the variable itself.
template <class T>
T parse_setting(const settings::Setting<T>& setting, Text spelled, Text value) {
  if (auto parsed = setting.try_parse(value)) return *parsed;
  throw UsageError(setting.problem(spelled, value));
}

int positive_int(Text spelled, Text value) {
  return parse_int(spelled, value, 1, settings::kMaxCount, settings::count_expectation());
}

// Seconds as a decimal number ("5", "0.1") up to `max_seconds`, in ms.
long long parse_seconds(Text spelled, Text value, long long max_seconds) {
  const auto millis = detail::parse_seconds_as_milliseconds(value);
  if (!millis || *millis > max_seconds * 1000) {
    throw UsageError(
        settings::bad_value_message(spelled, "a number of seconds (e.g. 5 or 0.5)", value));
  }
  return *millis;
}

// Switches store true from the command line; a config layer may store false.
bool parse_switch(Text spelled, Text value) {
  if (value == "true" || value == "True") return true;
  if (value == "false" || value == "False") return false;
  throw UsageError(spelled + " expects true or false, got '" + value + "'");
}

std::string non_empty(Text spelled, Text value, Text what) {
  if (value.empty()) throw UsageError(spelled + " expects " + what + ", got an empty value");
  return value;
}

// "all", or GPU indices like "0,2": CUDA_VISIBLE_DEVICES for every rank.
std::string parse_gpu_ids(Text spelled, Text value) {
  if (value == "all") return value;
  std::set<std::string> seen;
  std::stringstream list(value + ",");
  for (std::string entry; std::getline(list, entry, ',');) {
    if (entry.empty() || entry.size() > 6 ||
        entry.find_first_not_of("0123456789") != std::string::npos) {
      throw UsageError(spelled +
                       " expects 'all' or GPU indices separated by commas (e.g. 0,1), got '" +
                       value + "'");
    }
    if (!seen.insert(entry).second) throw UsageError(spelled + " lists GPU " + entry + " twice");
  }
  return value;
}

std::string show_bool(bool value) { return value ? "true" : "false"; }
std::string show_int(const std::optional<int>& value) {
  return value ? std::to_string(*value) : "(unset)";
}
std::string show_text(const std::optional<std::string>& value) { return value.value_or("(unset)"); }
// An optional value of the settings contract, as the ranks would get it.
template <class T>
std::string show_setting(const settings::Setting<T>& setting, const std::optional<T>& value) {
  return value ? setting.format(*value) : "(unset)";
}

// A value of `setting`; the text "none" of a setting whose default is
// "none" (the DeepSpeed config file: Accelerate writes it for "no file")
// leaves the option unset, as the other settings' texts never do.
template <class T>
void store(std::optional<T>& field, T value, const settings::Setting<T>& setting) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (value == "none" && setting.fallback == "none") {
      field.reset();
      return;
    }
  }
  (void)setting;
  field = std::move(value);
}

// A switch row: `member` is the bool it sets.
#define ACCELERATE_SWITCH(name, short_name, member, help)                  \
  {                                                                        \
    name, short_name, nullptr, help,                                       \
        [](Options& o, Text f, Text v) { o.member = parse_switch(f, v); }, \
        [](const Options& o) { return show_bool(o.member); }               \
  }

// Built on first use: the rows read other files' globals (the Settings).
const std::vector<FlagSpec>& flags() {
  static const std::vector<FlagSpec> rows = {
      {"config_file", 0, "FILE",
       "YAML config file (default: $HF_HOME/accelerate/default_config.yaml when it exists); flags "
       "win over it",
       [](Options& o, Text f, Text v) { o.config_file = non_empty(f, v, "a file"); },
       [](const Options& o) { return show_text(o.config_file); }},
      {"num_processes", 0, "N",
       "processes of the whole job, over all machines (default: visible NVIDIA GPUs per machine, "
       "or 1 "
       "with --cpu or none)",
       [](Options& o, Text f, Text v) { o.num_processes = positive_int(f, v); },
       [](const Options& o) { return std::to_string(o.num_processes); }},
      ACCELERATE_SWITCH("cpu", 0, cpu, "run on the CPU even if GPUs are present"),
      ACCELERATE_SWITCH("multi_gpu", 0, multi_gpu,
                        "one process per GPU; an error where no GPU is visible or with --cpu"),
      {"gpu_ids", 0, "all|I,J",
       "GPUs the ranks may use (CUDA_VISIBLE_DEVICES); 'all' leaves it as it is",
       [](Options& o, Text f, Text v) { o.gpu_ids = parse_gpu_ids(f, v); },
       [](const Options& o) { return show_text(o.gpu_ids); }},
      {"num_machines", 0, "M", "machines in the job (default 1, or SLURM_NNODES in a Slurm step)",
       [](Options& o, Text f, Text v) { o.num_machines = positive_int(f, v); },
       [](const Options& o) { return std::to_string(o.num_machines); }},
      {"machine_rank", 0, "R", "rank of this machine, 0 .. M-1 (default 0, or SLURM_NODEID)",
       [](Options& o, Text f, Text v) {
         o.machine_rank =
             parse_int(f, v, 0, settings::kMaxCount, "a whole number from 0 to 1000000");
       },
       [](const Options& o) { return std::to_string(o.machine_rank); }},
      {"main_process_ip", 0, "IP",
       "address of machine rank 0 (default 127.0.0.1, or Slurm's first node; required when M > 1)",
       [](Options& o, Text f, Text v) { o.main_process_ip = non_empty(f, v, "an address"); },
       [](const Options& o) { return o.main_process_ip; }},
      {"main_process_port", 0, "P",
       "rendezvous port on machine rank 0 (default 29500, under Slurm 20000 + SLURM_JOB_ID % "
       "10000; "
       "0 picks a free port, one machine only)",
       [](Options& o, Text f, Text v) {
         o.main_process_port =
             parse_int(f, v, 0, 65535, "a port number 1..65535 (or 0 for any free port)");
       },
       [](const Options& o) { return std::to_string(o.main_process_port); }},
      ACCELERATE_SWITCH(
          "same_network", 0, same_network,
          "the machines share a network (accepted; the static rendezvous always needs a "
          "reachable --main_process_ip)"),
      {"rdzv_backend", 0, "static", "rendezvous backend; only 'static' is supported",
       [](Options& o, Text f, Text v) {
         if (v != "static") {
           throw UsageError(
               f + " '" + v +
               "' is not supported: accelerate-cpp has only the static "
               "rendezvous (--rdzv_backend static, with --main_process_ip/--main_process_port)");
         }
         o.rdzv_backend = v;
       },
       [](const Options& o) { return o.rdzv_backend; }},
      {"rdzv_conf", 0, "K=V,...",
       "rendezvous settings; timeout=SECONDS: how long ranks wait for each other",
       [](Options& o, Text f, Text v) {
         rdzv_timeout_seconds(f, v);  // checks every key
         o.rdzv_conf = v;
       },
       [](const Options& o) { return show_text(o.rdzv_conf); }},
      {"max_restarts", 0, "N",
       "restart the local processes up to N times when one fails (default 0)",
       [](Options& o, Text f, Text v) {
         o.max_restarts =
             parse_int(f, v, 0, settings::kMaxCount, "a whole number from 0 to 1000000");
       },
       [](const Options& o) { return std::to_string(o.max_restarts); }},
      {"monitor_interval", 0, "SECONDS", "pause between a failure and the restart (default 0.1)",
       [](Options& o, Text f, Text v) {
         o.monitor_interval_ms = static_cast<int>(parse_seconds(f, v, 3600));
       },
       [](const Options& o) {
         std::ostringstream out;
         out << o.monitor_interval_ms / 1000.0;
         return out.str();
       }},
      {"mixed_precision", 0, "no|bf16|fp16", "mixed precision for the job",
       [](Options& o, Text f, Text v) {
         o.mixed_precision = parse_setting(settings::kMixedPrecision, f, v);
       },
       [](const Options& o) {
         return o.mixed_precision ? to_string(*o.mixed_precision) : std::string("(unset)");
       }},
      {"gradient_accumulation_steps", 0, "K", "batches to accumulate before each optimizer step",
       [](Options& o, Text f, Text v) {
         o.gradient_accumulation_steps = parse_setting(settings::kGradientAccumulationSteps, f, v);
       },
       [](const Options& o) { return show_int(o.gradient_accumulation_steps); }},
      ACCELERATE_SWITCH("debug", 0, debug,
                        "check collective shapes across ranks; list the settings"),
      {"num_cpu_threads_per_process", 0, "T",
       "OMP_NUM_THREADS for each process, with OPENBLAS_NUM_THREADS=1 (default: cores / local "
       "processes)",
       [](Options& o, Text f, Text v) {
         o.num_cpu_threads_per_process = parse_setting(settings::kOmpNumThreads, f, v);
       },
       [](const Options& o) { return show_int(o.num_cpu_threads_per_process); }},
      ACCELERATE_SWITCH("module", 'm', module,
                        "PROGRAM is a Python module: run python3 -m PROGRAM"),
      ACCELERATE_SWITCH("no_python", 0, no_python, "run PROGRAM as is, even if it ends in .py"),
      ACCELERATE_SWITCH("quiet", 'q', quiet, "print no informational launcher lines"),
      {"log_dir", 0, "DIR",
       "also write each rank's output to DIR/attempt_<restart>/rank_<rank>/{stdout,stderr}.log",
       [](Options& o, Text f, Text v) { o.log_dir = non_empty(f, v, "a folder"); },
       [](const Options& o) { return show_text(o.log_dir); }},
      {"tee", 0, "0-3",
       "streams written to the --log_dir files: 1 stdout, 2 stderr, 3 both (default 3), 0 none",
       [](Options& o, Text f, Text v) {
         o.tee = parse_int(f, v, 0, 3, "0, 1 (stdout), 2 (stderr) or 3 (both)");
       },
       [](const Options& o) { return show_int(o.tee); }},
      {"mpirun_hostfile", 0, "FILE", "start the ranks with mpirun --hostfile FILE (OpenMPI)",
       [](Options& o, Text f, Text v) { o.mpirun_hostfile = non_empty(f, v, "a file"); },
       [](const Options& o) { return show_text(o.mpirun_hostfile); }},
      // Sharded training (docs/launching.md, "Sharded training"): Accelerate's
      // DeepSpeed and FSDP flags, mapped onto the one ZeRO engine; every value
      // flag is a row of common/sharding_launch_settings.h.
      ACCELERATE_SWITCH("use_deepspeed", 0, use_deepspeed,
                        "shard the training state with ZeRO (DeepSpeed's flags below)"),
      ACCELERATE_SWITCH(
          "use_fsdp", 0, use_fsdp,
          "shard the training state with ZeRO, chosen by FSDP's names (FULL_SHARD, SHARD_GRAD_OP, "
          "NO_SHARD)"),
      ACCELERATE_SWITCH("use_parallelism_config", 0, use_parallelism_config,
                        "apply the parallelism_config sizes below (dp_replicate_size x "
                        "dp_shard_size: hybrid sharding with FSDP)"),
#define ACCELERATE_SHARDING_FLAG(section, name, Type, setting, metavar, yaml)  \
  {#name,                                                                      \
   0,                                                                          \
   metavar,                                                                    \
   settings::setting.about.meaning,                                            \
   [](Options& o, Text f, Text v) {                                            \
     store(o.name, parse_setting(settings::setting, f, v), settings::setting); \
   },                                                                          \
   [](const Options& o) { return show_setting(settings::setting, o.name); },   \
   settings::setting.about.default_text},
      ACCELERATE_SHARDING_LAUNCH_SETTINGS(ACCELERATE_SHARDING_FLAG)
#undef ACCELERATE_SHARDING_FLAG
          ACCELERATE_SWITCH("dry_run", 0, dry_run,
                            "print the settings (and where each came from) and the exact commands, "
                            "start nothing"),
  };
  return rows;
}

#undef ACCELERATE_SWITCH

}  // namespace

const std::vector<FlagSpec>& launch_flag_table() { return flags(); }

std::optional<std::string> rdzv_timeout_seconds(const std::string& spelled,
                                                const std::string& conf) {
  std::optional<std::string> timeout;
  std::stringstream items(conf);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    std::string key = item.substr(0, eq);
    if (eq == std::string::npos || (key != "timeout" && key != "join_timeout")) {
      throw UsageError(spelled + " item '" + item +
                       "' is not supported; the static rendezvous "
                       "understands timeout=SECONDS (or join_timeout=SECONDS)");
    }
    std::string value = item.substr(eq + 1);
    parse_setting(settings::kTimeout, spelled + " " + key, value);
    timeout = value;
  }
  return timeout;
}

}  // namespace accelerate::launcher
