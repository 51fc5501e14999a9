#include "launcher/launch_options.h"

#include <algorithm>
#include <sstream>

#include "accelerate/detail/enum_names.h"
#include "common/edit_distance.h"
#include "launcher/launch_errors.h"

namespace accelerate::launcher {
namespace {

[[noreturn]] void throw_unknown_flag(const std::string& spelled, const std::string& canonical) {
  const FlagSpec* closest = nullptr;
  // Beyond about a third of the name in edits, a suggestion is a guess.
  std::size_t best = std::min<std::size_t>(3, std::max<std::size_t>(1, canonical.size() / 3)) + 1;
  for (const auto& spec : launch_flag_table()) {
    std::size_t distance = edit_distance(canonical, spec.name);
    if (distance < best) best = distance, closest = &spec;
  }
  std::string hint = closest ? "did you mean --" + std::string(closest->name) + "?"
                             : "see 'accelerate launch --help'";
  throw UsageError("unknown flag '" + spelled + "'; " + hint +
                   " (flags go before PROGRAM; use '--' before a PROGRAM that starts with '-')");
}

const FlagSpec* find_short_flag(char letter) {
  for (const auto& spec : launch_flag_table()) {
    if (spec.short_name == letter) return &spec;
  }
  return nullptr;
}

}  // namespace

const char* to_string(OptionSource source) {
  static constexpr accelerate::detail::EnumName<OptionSource> kOptionSourceNames[] = {
      {OptionSource::kDefault, "default"},
      {OptionSource::kConfigFile, "config file"},
      {OptionSource::kSlurm, "slurm"},
      {OptionSource::kFlag, "flag"},
      {OptionSource::kPicked, "picked: a free port"}};
  static_assert(accelerate::detail::names_are_distinct(kOptionSourceNames));
  return accelerate::detail::enum_name(kOptionSourceNames, source, "default");
}

OptionSource LaunchOptions::source_of(const std::string& name) const {
  auto it = sources.find(name);
  return it == sources.end() ? OptionSource::kDefault : it->second;
}

settings::Origin LaunchOptions::origin_of(const std::string& name) const {
  auto it = origins.find(name);
  return it == origins.end() ? settings::Origin::flag("--" + name) : it->second;
}

const FlagSpec* find_launch_flag(const std::string& canonical_name) {
  for (const auto& spec : launch_flag_table()) {
    if (canonical_name == spec.name) return &spec;
  }
  return nullptr;
}

ParsedLaunchCommand parse_launch_arguments(const std::vector<std::string>& args) {
  ParsedLaunchCommand parsed;
  LaunchOptions& options = parsed.options;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // PROGRAM ("-" alone is not a flag)
    if (arg == "-h" || arg == "--help") {
      parsed.show_help = true;
      return parsed;
    }
    // Split "--name=value" and normalise "--foo-bar" to "foo_bar".
    std::string spelled = arg;
    std::optional<std::string> inline_value;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      spelled = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    const FlagSpec* spec = nullptr;
    std::string canonical;
    if (spelled.size() == 2 && spelled[1] != '-') {
      spec = find_short_flag(spelled[1]);
      canonical = spelled.substr(1);
    } else if (spelled.rfind("--", 0) == 0) {
      canonical = spelled.substr(2);
      std::replace(canonical.begin(), canonical.end(), '-', '_');
      spec = find_launch_flag(canonical);
    }
    if (spec == nullptr) throw_unknown_flag(spelled, canonical);

    std::string value = "true";
    if (spec->value_name == nullptr) {
      if (inline_value) throw UsageError(spelled + " takes no value, got '" + *inline_value + "'");
    } else if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      throw UsageError(spelled + " needs a value (" + spec->value_name + ")");
    }
    spec->apply(options, spelled, value);
    options.sources[spec->name] = OptionSource::kFlag;
    options.origins[spec->name] = settings::Origin::flag(spelled);
  }
  if (i >= args.size()) {
    throw UsageError("no program given; usage: accelerate launch [flags] PROGRAM [ARGS...]");
  }
  options.program = args[i];
  options.program_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  return parsed;
}

namespace {

std::string text(int number) { return std::to_string(number); }

// GPUs the ranks of this machine will see: the --gpu_ids list when given
// (it replaces CUDA_VISIBLE_DEVICES, so it can only name GPUs that exist).
int gpus_for_ranks(const LaunchOptions& options, const MachineFacts& facts) {
  if (!options.gpu_ids || *options.gpu_ids == "all" || facts.visible_gpus == 0)
    return facts.visible_gpus;
  return static_cast<int>(std::count(options.gpu_ids->begin(), options.gpu_ids->end(), ',')) + 1;
}

}  // namespace

void resolve_launch_options(LaunchOptions& options, const MachineFacts& facts) {
  if (options.cpu && options.multi_gpu) {
    throw UsageError(
        "--cpu and --multi_gpu conflict: choose CPU processes (--cpu) or one process per GPU");
  }
  if (options.use_deepspeed && options.use_fsdp) {
    throw UsageError(
        "--use_deepspeed and --use_fsdp conflict: both choose how ZeRO shards the training; give "
        "one of them");
  }
  const int gpus = gpus_for_ranks(options, facts);
  if (options.multi_gpu && gpus == 0) {
    // From a config file (distributed_type: MULTI_GPU) the flag to change is --cpu.
    const std::string what =
        options.source_of("multi_gpu") == OptionSource::kConfigFile
            ? "the config file asks for one process per GPU (distributed_type MULTI_GPU)"
            : "--multi_gpu";
    throw UsageError(what +
                     ": no NVIDIA GPU is visible on this machine; use --cpu --num_processes N "
                     "to run N processes on the CPU");
  }
  if (options.machine_rank >= options.num_machines) {
    throw UsageError("--machine_rank " + text(options.machine_rank) +
                     " is out of range for --num_machines " + text(options.num_machines) +
                     " (machine ranks are 0.." + text(options.num_machines - 1) + ")");
  }
  if (options.source_of("num_processes") == OptionSource::kDefault) {
    options.num_processes = ((!options.cpu && gpus > 0) ? gpus : 1) * options.num_machines;
  }
  if (options.num_processes % options.num_machines != 0) {
    const int per_machine = std::max(1, options.num_processes / options.num_machines);
    throw UsageError("--num_processes " + text(options.num_processes) +
                     " is not divisible by --num_machines " + text(options.num_machines) +
                     ": it counts the processes of all machines, and every "
                     "machine starts the same number; use e.g. --num_processes " +
                     text(per_machine * options.num_machines) + " for " + text(per_machine) +
                     " per machine");
  }
  if (options.num_machines > 1 && options.source_of("main_process_ip") == OptionSource::kDefault) {
    throw UsageError("--main_process_ip is required when --num_machines is " +
                     text(options.num_machines) +
                     ": give the address of machine rank 0, reachable from every machine");
  }
  if (options.num_machines > 1 && options.main_process_port == 0) {
    throw UsageError(
        "--main_process_port 0 (pick a free port) works only with one machine; with "
        "--num_machines " +
        text(options.num_machines) + " give every machine the same fixed port");
  }
  if (options.module && options.no_python) {
    throw UsageError("--module and --no_python conflict: a module always runs with python3");
  }
  if (options.tee && !options.log_dir) {
    throw UsageError("--tee chooses what goes to the log files: give --log_dir DIR too");
  }
  if (options.mpirun_hostfile && options.num_machines > 1) {
    throw UsageError(
        "--mpirun_hostfile starts the processes of every machine from here; drop "
        "--num_machines (the hostfile lists the machines) and run one launcher only");
  }
}

std::vector<std::string> describe_effective_settings(const LaunchOptions& options) {
  std::vector<std::string> lines;
  for (const auto& spec : launch_flag_table()) {
    lines.push_back(std::string(spec.name) + " = " + spec.show(options) + " (" +
                    to_string(options.source_of(spec.name)) + ")");
  }
  return lines;
}

}  // namespace accelerate::launcher
