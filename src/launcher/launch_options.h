// The settings of one `accelerate launch` run and the table of flags that
// sets them. The table is the single source of truth for parsing, --help and
// the "effective settings" listing, so a new flag is one new row; a later
// config-file layer applies its values through the same rows and records its
// own OptionSource.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/mixed_precision.h"
#include "accelerate/sharding/deepspeed_plugin.h"
#include "common/settings.h"
#include "common/sharding_launch_settings.h"
#include "launcher/machine_facts.h"

namespace accelerate::launcher {

// Where an option's value came from. Users confuse the precedence of flags,
// config files and defaults (docs/launching.md), so every value keeps its origin.
// kSlurm: taken from the Slurm job the launcher runs in (SLURM_NNODES, ...);
// it beats a config file (the allocation is what really exists) and loses to
// a flag. kPicked: chosen by the launcher itself (--main_process_port 0
// becomes a free port), listed so a dry run does not claim the user typed it.
enum class OptionSource { kDefault, kConfigFile, kSlurm, kFlag, kPicked };
const char* to_string(OptionSource source);

struct LaunchOptions {
  // Total processes of the job, over all machines (Accelerate's meaning);
  // each machine starts num_processes / num_machines of them. 0 until
  // resolve_launch_options() picks the default.
  int num_processes = 0;
  bool cpu = false;
  bool multi_gpu = false;
  int num_machines = 1;
  int machine_rank = 0;
  std::string main_process_ip = "127.0.0.1";
  int main_process_port = 29500;  // 0: pick a free port (one machine only)
  bool same_network = false;  // recorded only: static rendezvous needs a reachable address anyway
  std::string rdzv_backend = "static";  // the only one supported
  // "key=value,..." (torchrun's spelling); only timeout/join_timeout (seconds,
  // becomes ACCELERATE_TIMEOUT) is understood.
  std::optional<std::string> rdzv_conf;
  int max_restarts = 0;           // restarts of the local group after a failure
  int monitor_interval_ms = 100;  // pause before a restart (--monitor_interval, seconds)
  std::optional<MixedPrecision> mixed_precision;
  std::optional<int> gradient_accumulation_steps;
  bool debug = false;
  std::optional<int> num_cpu_threads_per_process;
  std::optional<std::string> gpu_ids;  // "all" or "0,2": CUDA_VISIBLE_DEVICES
  bool module = false;                 // PROGRAM is a Python module: python3 -m PROGRAM
  bool no_python = false;              // run PROGRAM as is even when it ends in .py
  bool quiet = false;                  // no informational launcher lines
  std::optional<std::string> log_dir;  // per-rank log files (see docs/launching.md)
  std::optional<int> tee;              // streams copied to the log files: 1 out, 2 err, 3 both
  std::optional<std::string> mpirun_hostfile;  // run the ranks through mpirun
  std::optional<std::string> config_file;
  bool dry_run = false;  // print the settings and commands, start nothing

  // Sharded training (ZeRO), in DeepSpeed's or FSDP's words; each value
  // becomes a variable of the settings contract (common/settings.h) for the
  // ranks, written only when DeepSpeed (or FSDP) is in use and the value
  // was given.
  bool use_deepspeed = false;
  bool use_fsdp = false;
  bool use_parallelism_config = false;  // the parallelism_config sizes below apply
  // One std::optional per row of common/sharding_launch_settings.h
  // (zero_stage, deepspeed_config_file ("none" is stored as nullopt), ...,
  // fsdp_sync_module_states).
#define ACCELERATE_LAUNCH_OPTION(section, name, Type, setting, metavar, yaml) \
  std::optional<Type> name;
  ACCELERATE_SHARDING_LAUNCH_SETTINGS(ACCELERATE_LAUNCH_OPTION)
#undef ACCELERATE_LAUNCH_OPTION

  std::string program;
  std::vector<std::string> program_args;

  // Origin of each option, keyed by its canonical name ("num_processes");
  // an option missing here still has its default.
  std::map<std::string, OptionSource> sources;
  OptionSource source_of(const std::string& name) const;
  // Where each option a flag or the config file gave was written (the flag
  // as spelled; the file, line and key), for messages about its value.
  std::map<std::string, settings::Origin> origins;
  // That place; for an option set otherwise (a program, the Slurm job), its flag.
  settings::Origin origin_of(const std::string& name) const;

  // Processes this machine starts (num_processes / num_machines).
  int local_processes() const { return num_processes / (num_machines > 0 ? num_machines : 1); }
};

// One row of the flag table.
struct FlagSpec {
  const char* name;        // canonical spelling, underscores: "num_processes"
  char short_name;         // 'm' for -m, or 0
  const char* value_name;  // "N" for flags that take a value; nullptr for switches
  const char* help;
  // Stores `value` ("true" for a switch). `spelled` is the flag as the user
  // wrote it, for error messages. Throws UsageError for a bad value.
  void (*apply)(LaunchOptions& options, const std::string& spelled, const std::string& value);
  // The current value as text, for the effective-settings listing.
  std::string (*show)(const LaunchOptions& options);
  // The default, for --help (rows of the settings contract); null: in `help`.
  const char* default_text = nullptr;
};

const std::vector<FlagSpec>& launch_flag_table();  // launch_flags.cpp
// The row for a canonical name, or nullptr.
const FlagSpec* find_launch_flag(const std::string& canonical_name);

struct ParsedLaunchCommand {
  bool show_help = false;
  LaunchOptions options;
};

// Parses the arguments that follow "launch". Flags end at the first argument
// that does not start with '-' (or after "--"); that argument is PROGRAM and
// everything after it is passed to PROGRAM untouched. Throws UsageError.
ParsedLaunchCommand parse_launch_arguments(const std::vector<std::string>& args);

// Fills the defaults that depend on the machine (num_processes) and checks
// combinations of flags (machine_rank < num_machines, num_processes divisible
// by num_machines, ...). Pure: network checks are in network_checks.h.
// Throws UsageError.
void resolve_launch_options(LaunchOptions& options, const MachineFacts& facts);

// The text of `accelerate launch --help`, built from the table, its rows in
// Hugging Face's groups (launch_help.cpp).
std::string launch_help_text();
// The --help group a flag is listed under ("" for a flag in none, which the
// tests refuse).
std::string launch_help_group(const std::string& name);

// The timeout (seconds, as written) in a --rdzv_conf value "timeout=60,...",
// or nullopt. Throws UsageError naming `spelled` for keys we don't support.
std::optional<std::string> rdzv_timeout_seconds(const std::string& spelled,
                                                const std::string& conf);

// "num_processes = 2 (flag)", one line per option, in table order.
std::vector<std::string> describe_effective_settings(const LaunchOptions& options);

}  // namespace accelerate::launcher
