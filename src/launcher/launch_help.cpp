// `accelerate launch --help`: the flag table's rows in the groups Hugging
// Face's launcher prints (hardware, resources, training paradigm, DeepSpeed,
// FSDP, ParallelismConfig), so that a user who knows that listing finds each
// flag where they expect it.
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "launcher/launch_options.h"

namespace accelerate::launcher {
namespace {

struct HelpGroup {
  const char* title;
  std::vector<const char*> names;  // whole names
  const char* prefix;              // or every name starting with it (nullptr: none)
};

const std::vector<HelpGroup>& help_groups() {
  static const std::vector<HelpGroup> groups = {
      {"Hardware selection", {"cpu", "multi_gpu", "gpu_ids"}, nullptr},
      {"Resource selection",
       {"num_processes", "num_machines", "num_cpu_threads_per_process", "mixed_precision",
        "gradient_accumulation_steps"},
       nullptr},
      {"Training paradigm", {"use_deepspeed", "use_fsdp", "use_parallelism_config"}, nullptr},
      {"Machines, rendezvous and restarts",
       {"machine_rank", "main_process_ip", "main_process_port", "same_network", "rdzv_backend",
        "rdzv_conf", "max_restarts", "monitor_interval", "mpirun_hostfile"},
       nullptr},
      {"Program, output and checks",
       {"config_file", "module", "no_python", "quiet", "debug", "log_dir", "tee", "dry_run"},
       nullptr},
      {"DeepSpeed (with --use_deepspeed)",
       {"zero_stage", "deepspeed_config_file", "gradient_clipping", "offload_optimizer_device",
        "offload_param_device", "zero3_init_flag", "zero3_save_16bit_model"},
       nullptr},
      {"FSDP (with --use_fsdp)", {}, "fsdp_"},
      {"ParallelismConfig (with --use_parallelism_config)", {}, "parallelism_config_"},
  };
  return groups;
}

bool belongs(const HelpGroup& group, const std::string& name) {
  for (const char* member : group.names)
    if (name == member) return true;
  return group.prefix && name.rfind(group.prefix, 0) == 0;
}

// One row: the flag, then its help word-wrapped into the right-hand column;
// a flag too long for the column puts its help on the next line, as
// argparse does, so the column stays straight.
void write_row(std::ostringstream& out, const FlagSpec& spec) {
  constexpr std::size_t kHelpColumn = 35;
  constexpr std::size_t kWidth = 80;
  std::string left = "  ";
  if (spec.short_name) left += std::string("-") + spec.short_name + ", ";
  left += "--" + std::string(spec.name);
  if (spec.value_name) left += " " + std::string(spec.value_name);
  std::string line = left;
  if (left.size() + 1 > kHelpColumn) {
    out << line << "\n";
    line.clear();
  }
  line += std::string(kHelpColumn - line.size(), ' ');
  bool line_has_words = false;
  std::istringstream words(
      std::string(spec.help) +
      (spec.default_text ? " (default: " + std::string(spec.default_text) + ")" : ""));
  for (std::string word; words >> word;) {
    if (line_has_words && line.size() + 1 + word.size() > kWidth) {
      out << line << "\n";
      line = std::string(kHelpColumn, ' ');
      line_has_words = false;
    }
    if (line_has_words) line += ' ';
    line += word;
    line_has_words = true;
  }
  out << line << "\n";
}

}  // namespace

std::string launch_help_group(const std::string& name) {
  for (const auto& group : help_groups())
    if (belongs(group, name)) return group.title;
  return "";
}

std::string launch_help_text() {
  std::ostringstream out;
  out << "usage: accelerate launch [flags] PROGRAM [ARGS...]\n\n"
         "Starts PROGRAM once per process with torchrun's variables (RANK, WORLD_SIZE,\n"
         "MASTER_ADDR, ...), prefixes their output by rank, and stops every process when\n"
         "one fails. A PROGRAM ending in .py runs with python3. Flags may be written\n"
         "--foo_bar or --foo-bar, with the value after a space or '='.\n";
  for (const auto& group : help_groups()) {
    out << "\n" << group.title << ":\n";
    for (const auto& spec : launch_flag_table())
      if (belongs(group, spec.name)) write_row(out, spec);
  }
  out << "\nOther:\n"
         "  -h, --help                       show this help\n\n"
         "Exit code: 0 when every process succeeds, else the first failing process's\n"
         "code (128+N for signal N); 2 for usage errors (a bad flag or value, a\n"
         "program or file that is missing). See docs/launching.md.\n";
  return out.str();
}

}  // namespace accelerate::launcher
