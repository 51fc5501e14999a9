#include "launcher/mpirun_command.h"

#include <fstream>
#include <sstream>

#include "common/environment_text.h"
#include "common/settings.h"
#include "launcher/launch_errors.h"

namespace accelerate::launcher {
namespace {

// torchrun's topology variables: set under mpirun they would win over
// OMPI_COMM_WORLD_* in every rank (JobState reads them first).
constexpr const char* kTopologyVariables[] = {
    "RANK",       "LOCAL_RANK",       "WORLD_SIZE", "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",  "ROLE_WORLD_SIZE"};

}  // namespace

Hostfile read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read --mpirun_hostfile '" + path + "' (no such file?)");
  Hostfile hostfile;
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host;
    if (!(words >> host)) continue;
    if (hostfile.first_host.empty()) hostfile.first_host = host;
    int slots = 1;
    for (std::string word; words >> word;) {
      if (word.rfind("slots=", 0) != 0) continue;
      const auto count = detail::parse_integer_in(word.substr(6), 1, settings::kMaxCount);
      if (!count)
        throw LaunchFailure("--mpirun_hostfile '" + path + "': '" + word + "' is not a slot count");
      slots = static_cast<int>(*count);
    }
    hostfile.slots += slots;
  }
  if (hostfile.first_host.empty()) {
    throw LaunchFailure("--mpirun_hostfile '" + path +
                        "' lists no hosts (one 'host slots=N' per line)");
  }
  return hostfile;
}

MpirunLaunch build_mpirun_launch(const LaunchOptions& options, const ResolvedCommand& program,
                                 const Environment& launcher_environment,
                                 const Environment& rank_environment,
                                 const std::string& mpirun_path, const Hostfile& hostfile,
                                 bool as_root) {
  MpirunLaunch launch;
  launch.environment = rank_environment;
  for (const char* name : kTopologyVariables) launch.environment.erase(name);
  if (options.source_of("main_process_ip") == OptionSource::kDefault &&
      hostfile.first_host != "localhost") {
    launch.environment["MASTER_ADDR"] = hostfile.first_host;
  }

  std::vector<std::string>& argv = launch.command.argv;
  argv = {"mpirun", "--hostfile", *options.mpirun_hostfile, "-np",
          std::to_string(options.num_processes)};
  if (as_root) argv.push_back("--allow-run-as-root");
  if (options.num_processes > hostfile.slots) argv.push_back("--oversubscribe");
  // Local ranks inherit mpirun's whole environment; remote ones get only
  // what -x names: every variable we added or changed.
  for (const auto& [key, value] : launch.environment) {
    auto before = launcher_environment.find(key);
    if (before == launcher_environment.end() || before->second != value || key == "MASTER_ADDR" ||
        key == "MASTER_PORT") {
      argv.push_back("-x");
      argv.push_back(key);
    }
  }
  // `python3 train.py` as mpirun would find it on every host: by name.
  argv.push_back(program.argv[0] == "python3" ? "python3" : program.executable);
  argv.insert(argv.end(), program.argv.begin() + 1, program.argv.end());
  launch.command.executable = mpirun_path;
  return launch;
}

}  // namespace accelerate::launcher
