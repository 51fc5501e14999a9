// Parses which process of which job this is from the variables its launcher
// set (job_state.h lists the sources; docs/distributed.md the variables users
// rely on). Every error is a ConfigError whose one-line message quotes the
// variable and its value, because a wrong topology otherwise shows up only as
// a rendezvous that hangs silently until the timeout.
#include "accelerate/common/job_state.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"
#include "common/environment_text.h"
#include "common/settings.h"
#include "common/slurm_lists.h"

namespace accelerate {
namespace {

using detail::fail;
using detail::first_host_checked;
using detail::quoted;
using detail::tasks_on_node_checked;

// Strict on purpose: atoi would read "4x" as 4 and " " as 0.
int parse_int(const std::string& name, const std::string& text) {
  const auto value = detail::parse_integer(text);
  if (!value) fail(settings::bad_value_message(name, "a whole number", text));
  if (*value > INT_MAX || *value < INT_MIN) {
    fail(
        settings::bad_value_message(name, "a whole number up to " + std::to_string(INT_MAX), text));
  }
  return static_cast<int>(*value);
}

// A number with where it came from, so that a check can quote both sides:
// "RANK=5 is out of range for WORLD_SIZE=4".
struct Setting {
  int value = 0;
  std::string origin;
};

std::optional<Setting> read_int(const Environment& env, const std::string& name) {
  auto text = lookup(env, name);
  if (!text) return std::nullopt;
  return Setting{parse_int(name, *text), name + "=" + *text};
}

// The first of `names` that is set, with its name; Slurm has a step-level
// and a job-level spelling of several values.
std::optional<std::pair<std::string, std::string>> first_set(
    const Environment& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (auto value = lookup(env, name)) return std::make_pair(std::string(name), *value);
  }
  return std::nullopt;
}

// Launchers set these in pairs; one without the other is a broken environment.
void require_pair(const std::optional<Setting>& first, const char* first_name,
                  const std::optional<Setting>& second, const char* second_name) {
  if (first.has_value() == second.has_value()) return;
  fail(std::string(first ? first_name : second_name) + " is set but " +
       (first ? second_name : first_name) + " is not; the launcher sets both");
}

// ---- Topology from each launcher ----------------------------------------------

struct Topology {
  Setting rank, world, local_rank, local_world, node_rank, num_nodes;
  std::optional<std::string> launcher_master_addr;  // Slurm's first host
  LaunchSource source = LaunchSource::kSingleProcess;
};

std::string count_of(int count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

void check_index(const Setting& index, const Setting& count, const char* plural) {
  if (index.value < 0) fail(index.origin + " must not be negative");
  if (index.value >= count.value) {
    fail(index.origin + " is out of range for " + count.origin + " (" + plural + " are 0.." +
         std::to_string(count.value - 1) + ")");
  }
}

// Fills in what the launcher left out and checks the rest, in an order where
// each message names the first inconsistent variable. Ranks are assumed to be
// laid out node by node, which is what every supported launcher does.
Topology complete(LaunchSource source, Setting rank, Setting world,
                  std::optional<Setting> local_rank, std::optional<Setting> local_world,
                  std::optional<Setting> node_rank,
                  std::optional<Setting> num_nodes = std::nullopt) {
  if (world.value < 1) fail(world.origin + " must be at least 1");
  check_index(rank, world, "ranks");
  if (!local_world)
    local_world = Setting{world.value, "local world size " + std::to_string(world.value)};
  if (local_world->value < 1) fail(local_world->origin + " must be at least 1");
  if (local_world->value > world.value)
    fail(local_world->origin + " is larger than " + world.origin);
  if (!local_rank) {
    const int derived = rank.value % local_world->value;
    local_rank =
        Setting{derived, "local rank " + std::to_string(derived) + " (from " + rank.origin + ")"};
  }
  check_index(*local_rank, *local_world, "local ranks");
  if (!num_nodes) {
    const int nodes = (world.value + local_world->value - 1) / local_world->value;
    num_nodes = Setting{nodes, count_of(nodes, "node") + " (" + world.origin + " over " +
                                   local_world->origin + ")"};
  }
  if (num_nodes->value < 1) fail(num_nodes->origin + " must be at least 1");
  if (!node_rank) node_rank = Setting{rank.value / local_world->value, "the node rank"};
  check_index(*node_rank, *num_nodes, "node ranks");
  return Topology{rank,       world,      *local_rank,  *local_world,
                  *node_rank, *num_nodes, std::nullopt, source};
}

// torchrun, and our own launcher, which sets the same variables.
Topology parse_torchrun(const Environment& env) {
  auto rank = read_int(env, "RANK");
  auto world = read_int(env, "WORLD_SIZE");
  require_pair(rank, "RANK", world, "WORLD_SIZE");
  auto local_rank = read_int(env, "LOCAL_RANK");
  auto local_world = read_int(env, "LOCAL_WORLD_SIZE");
  auto group_rank = read_int(env, "GROUP_RANK");
  // Without LOCAL_WORLD_SIZE only a single node can be described; guessing a
  // layout for a job that evidently spans nodes would hang the rendezvous.
  std::optional<Setting> sign_of_other_nodes;
  if (local_rank && local_rank->value != rank->value) sign_of_other_nodes = local_rank;
  if (group_rank && group_rank->value != 0) sign_of_other_nodes = group_rank;
  if (!local_world && sign_of_other_nodes) {
    fail(sign_of_other_nodes->origin + " with " + rank->origin +
         " means the job spans several nodes, but "
         "LOCAL_WORLD_SIZE is not set; set it to the number of processes per node");
  }
  return complete(LaunchSource::kTorchrun, *rank, *world, local_rank, local_world, group_rank);
}

struct MpiFlavor {
  const char *rank, *size, *local_rank, *local_size;
};
constexpr MpiFlavor kMpiFlavors[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},  // MPICH and Intel MPI (Hydra)
    {"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
     "MV2_COMM_WORLD_LOCAL_SIZE"},
};

// nullopt: the flavor gives no local ranks and Slurm's variables should be
// used instead. srun --mpi=pmi2 sets only PMI_RANK and PMI_SIZE (Slurm's
// src/plugins/mpi/pmi2/mpi_pmi2.c, and seen under slurm-wlm 22.05).
std::optional<Topology> parse_mpi(const Environment& env, const MpiFlavor& mpi, bool in_srun_task) {
  auto rank = read_int(env, mpi.rank);
  auto size = read_int(env, mpi.size);
  require_pair(rank, mpi.rank, size, mpi.size);
  auto local_rank = read_int(env, mpi.local_rank);
  auto local_size = read_int(env, mpi.local_size);
  require_pair(local_rank, mpi.local_rank, local_size, mpi.local_size);
  if (!local_rank && in_srun_task) return std::nullopt;
  return complete(LaunchSource::kMpi, *rank, *size, local_rank, local_size, std::nullopt);
}

// srun sets SLURM_STEP_ID (and the older SLURM_STEPID) in every task it
// starts: srun(1), OUTPUT ENVIRONMENT VARIABLES. sbatch(1)'s list for the
// batch script has no step variables, although it does have SLURM_PROCID=0
// and SLURM_NTASKS, which may be >1 while one process runs the script; taking
// that for a distributed job would wait forever for the other ranks.
bool in_srun_task(const Environment& env) {
  return lookup(env, "SLURM_STEP_ID").has_value() || lookup(env, "SLURM_STEPID").has_value();
}

// srun sets all of these in every task (srun(1), OUTPUT ENVIRONMENT
// VARIABLES), so a missing one means a hand-made environment.
std::pair<std::string, std::string> require_slurm(const Environment& env,
                                                  std::initializer_list<const char*> names) {
  if (auto found = first_set(env, names)) return *found;
  std::string wanted = *names.begin();
  if (names.size() > 1) wanted += std::string(" (or ") + names.begin()[1] + ")";
  fail(wanted + " is not set although SLURM_STEP_ID is; srun sets both in every task");
}

Setting require_slurm_int(const Environment& env, std::initializer_list<const char*> names) {
  auto [name, text] = require_slurm(env, names);
  return Setting{parse_int(name, text), name + "=" + text};
}

// The step's own values come first: `srun -n 2` inside a larger allocation
// runs on part of it, and its rank 0 is on the step's first node.
Topology parse_slurm(const Environment& env) {
  const Setting rank = require_slurm_int(env, {"SLURM_PROCID"});
  const Setting world = require_slurm_int(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  Setting nodes = require_slurm_int(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"});
  if (nodes.value < 1) fail(nodes.origin + " must be at least 1");
  nodes.origin = count_of(nodes.value, "node") + " (" + nodes.origin + ")";
  const Setting node_id = require_slurm_int(env, {"SLURM_NODEID"});
  check_index(node_id, nodes, "node ids");
  const Setting local_rank = require_slurm_int(env, {"SLURM_LOCALID"});

  const auto [tasks_name, tasks_text] =
      require_slurm(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  const std::string tasks_subject = quoted(tasks_name, tasks_text);
  const int local_size = tasks_on_node_checked(tasks_text, node_id.value, tasks_subject);
  const Setting local_world{local_size, count_of(local_size, "task") + " on node " +
                                            std::to_string(node_id.value) + " (" + tasks_subject +
                                            ")"};
  Topology topology =
      complete(LaunchSource::kSlurm, rank, world, local_rank, local_world, node_id, nodes);
  // One node needs no host name: 127.0.0.1 works even where names don't resolve.
  if (nodes.value > 1 && !lookup(env, "MASTER_ADDR")) {
    const auto [list_name, list] =
        require_slurm(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"});
    topology.launcher_master_addr = first_host_checked(list, quoted(list_name, list));
  }
  return topology;
}

Topology detect_topology(const Environment& env) {
  if (lookup(env, "RANK") || lookup(env, "WORLD_SIZE")) return parse_torchrun(env);
  const bool srun_task = in_srun_task(env);
  for (const MpiFlavor& mpi : kMpiFlavors) {
    if (!lookup(env, mpi.rank) && !lookup(env, mpi.size)) continue;
    if (auto topology = parse_mpi(env, mpi, srun_task)) return *topology;
    break;
  }
  if (srun_task) return parse_slurm(env);
  return complete(LaunchSource::kSingleProcess, Setting{0, "rank 0"}, Setting{1, "1 process"},
                  std::nullopt, std::nullopt, std::nullopt);
}

std::string choose_master_addr(const Environment& env, const Topology& topology) {
  if (auto addr = lookup(env, "MASTER_ADDR")) return *addr;
  if (topology.launcher_master_addr) return *topology.launcher_master_addr;
  if (topology.num_nodes.value == 1) return "127.0.0.1";
  fail(std::string("the ") + to_string(topology.source) + " job spans " +
       topology.num_nodes.origin +
       " but MASTER_ADDR is not set; set it to the address of the host that runs rank 0");
}

int choose_master_port(const Environment& env, LaunchSource source) {
  auto port = read_int(env, "MASTER_PORT");
  if (!port && source == LaunchSource::kSlurm) {
    if (auto slurm_port = slurm_master_port(env)) return *slurm_port;
  }
  if (!port) return kDefaultMasterPort;
  if (port->value < 1 || port->value > 65535) fail(port->origin + " is outside 1..65535");
  return port->value;
}

// The program's option wins over the environment, which wins over the default.
template <class T>
T choose(const std::optional<T>& option, const Environment& env,
         const settings::Setting<T>& setting) {
  return option ? *option : setting.read_or_default(env);
}

std::chrono::milliseconds choose_timeout(const JobOptions& options, const Environment& env) {
  if (options.timeout()) {
    if (options.timeout()->count() <= 0) {
      fail("JobOptions::timeout must be positive, got " +
           std::to_string(options.timeout()->count()) + " ms");
    }
    return *options.timeout();
  }
  return settings::kTimeout.read_or_default(env);
}

// torchrun writes Python's str(bool): "True" or "False".
bool agent_store_in(const Environment& env) {
  constexpr const char* kVariable = "TORCHELASTIC_USE_AGENT_STORE";
  const auto text = lookup(env, kVariable);
  if (!text || text->empty()) return false;
  if (auto value = settings::parse_bool(*text)) return *value;
  fail(settings::bad_value_message(kVariable, "True or False", *text));
}

int restart_count_in(const Environment& env) {
  constexpr const char* kVariable = "TORCHELASTIC_RESTART_COUNT";
  const auto text = lookup(env, kVariable);
  if (!text || text->empty()) return 0;
  return settings::kRestartCount.parse(kVariable, *text);
}

DeviceSpec choose_device(bool use_cpu, const Hardware& hardware, const Setting& local_rank) {
  if (use_cpu || hardware.cuda_device_count <= 0) return DeviceSpec{};
  if (local_rank.value >= hardware.cuda_device_count) {
    const std::string devices = std::to_string(hardware.cuda_device_count);
    fail(local_rank.origin + " needs cuda:" + std::to_string(local_rank.value) + " but only " +
         devices + " CUDA device(s) are visible; start at most " + devices +
         " process(es) per node, or set " + settings::kUseCpu.variable() + "=1");
  }
  return DeviceSpec{DeviceSpec::Type::kCUDA, local_rank.value};
}

Backend choose_backend(const JobOptions& options, const DeviceSpec& device,
                       const Hardware& hardware, int world_size) {
  const Backend requested = options.backend().value_or(Backend::kNone);
  if (world_size == 1) return Backend::kNone;
  if (requested == Backend::kNccl) {
    if (!device.is_cuda())
      fail("backend 'nccl' needs CUDA, but this job runs on the CPU; use gloo");
    if (!hardware.nccl_available)
      fail("backend 'nccl' was requested but this LibTorch has no NCCL; use gloo");
    return Backend::kNccl;
  }
  if (requested == Backend::kGloo) return Backend::kGloo;
  return device.is_cuda() && hardware.nccl_available ? Backend::kNccl : Backend::kGloo;
}

}  // namespace

std::string DeviceSpec::str() const { return is_cuda() ? "cuda:" + std::to_string(index) : "cpu"; }

const char* to_string(LaunchSource source) {
  static constexpr detail::EnumName<LaunchSource> kLaunchSourceNames[] = {
      {LaunchSource::kSingleProcess, "single process"},
      {LaunchSource::kTorchrun, "torchrun"},
      {LaunchSource::kMpi, "mpi"},
      {LaunchSource::kSlurm, "slurm"}};
  static_assert(detail::names_are_distinct(kLaunchSourceNames));
  return detail::enum_name(kLaunchSourceNames, source, "unknown");
}

JobState JobState::from_environment(const Environment& env, const JobOptions& options,
                                    const Hardware& hardware) {
  const Topology topology = detect_topology(env);
  JobState state;
  state.rank = topology.rank.value;
  state.world_size = topology.world.value;
  state.local_rank = topology.local_rank.value;
  state.local_world_size = topology.local_world.value;
  state.node_rank = topology.node_rank.value;
  state.num_nodes = topology.num_nodes.value;
  state.source = topology.source;
  state.master_addr = choose_master_addr(env, topology);
  state.gloo_socket_ifname = lookup(env, "GLOO_SOCKET_IFNAME").value_or("");
  state.master_port = choose_master_port(env, topology.source);
  if (topology.source == LaunchSource::kTorchrun) {
    state.launcher_hosts_store = agent_store_in(env);
    state.restart_count = restart_count_in(env);
  }
  state.use_cpu = choose(options.cpu(), env, settings::kUseCpu);
  state.debug = choose(options.debug(), env, settings::kDebugMode);
  state.shared_memory_all_reduce =
      choose(options.shared_memory_all_reduce(), env, settings::kSharedMemoryAllReduce);
  state.timeout = choose_timeout(options, env);
  state.device = choose_device(state.use_cpu, hardware, topology.local_rank);
  state.backend = choose_backend(options, state.device, hardware, state.world_size);
  return state;
}

std::string JobState::rendezvous_store_prefix() const {
  if (!launcher_hosts_store) return "";
  return "/worker/attempt_" + std::to_string(restart_count);
}

std::string JobState::describe() const {
  return "rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " (local " +
         std::to_string(local_rank) + "/" + std::to_string(local_world_size) + ", node " +
         std::to_string(node_rank) + "/" + std::to_string(num_nodes) + ") " + device.str() + " " +
         to_string(backend) + " via " + to_string(source);
}

}  // namespace accelerate
