// JobState: which process of which job this is, parsed once from the
// environment and then never changed. It is a plain value (no LibTorch), so
// the launcher and the CLI share it with the library, and tests build one
// from a map.
//
// Sources, first match wins:
//   1. our launcher and torchrun: RANK, WORLD_SIZE, LOCAL_RANK,
//      LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, and
//      torchrun's TORCHELASTIC_USE_AGENT_STORE and TORCHELASTIC_RESTART_COUNT
//   2. MPI: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (OpenMPI),
//      PMI_RANK/PMI_SIZE with MPI_LOCALRANKID/MPI_LOCALNRANKS (MPICH, Intel),
//      MV2_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (MVAPICH)
//   3. Slurm job steps (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//      SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE
//      (the SLURM_STEP_* spellings first). Only tasks that srun started
//      count, recognised by SLURM_STEP_ID: an sbatch script has SLURM_PROCID
//      and SLURM_NTASKS too but is one process. An MPI launcher that gives no
//      local ranks under srun (srun --mpi=pmi2 sets only PMI_RANK/PMI_SIZE)
//      defers to Slurm.
//   4. nothing: a plain single process with no rendezvous.
// Settings read in every case: ACCELERATE_USE_CPU, ACCELERATE_DEBUG_MODE,
// ACCELERATE_TIMEOUT (seconds), and MASTER_ADDR / MASTER_PORT overrides.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "accelerate/common/arg.h"
#include "accelerate/common/backend.h"
#include "accelerate/common/environment.h"

namespace accelerate {

// Where the process runs its math. Kept LibTorch-free on purpose; the library
// converts it to a torch::Device.
struct DeviceSpec {
  enum class Type { kCPU, kCUDA };
  Type type = Type::kCPU;
  int index = -1;  // -1 for the CPU
  bool is_cuda() const { return type == Type::kCUDA; }
  std::string str() const;  // "cpu" or "cuda:3"
  bool operator==(const DeviceSpec& other) const {
    return type == other.type && index == other.index;
  }
};

// What launched this process; reported in errors and by `accelerate env`.
enum class LaunchSource { kSingleProcess, kTorchrun, kMpi, kSlurm };
const char* to_string(LaunchSource source);

// Facts about the machine that the parser cannot read from the environment.
struct Hardware {
  int cuda_device_count = 0;
  bool nccl_available = false;
};

// The default for ACCELERATE_TIMEOUT: how long rendezvous and each collective
// wait for the slowest rank before failing with a message that names it.
// Accelerate's 30 minutes hides hangs from its users; 5 minutes is long
// enough for rank 0 to write a large checkpoint while the others wait.
constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);
// MASTER_PORT when nothing sets it (torchrun's default).
constexpr int kDefaultMasterPort = 29500;

// Settings a program may impose over the environment (Accelerator's `cpu`,
// InitProcessGroupKwargs' `backend` and `timeout`, debug mode). Unset fields
// fall back to the environment, then to the documented defaults.
struct JobOptions {
  // Force the CPU even where CUDA is available (ACCELERATE_USE_CPU).
  ACCELERATE_ARG(std::optional<bool>, cpu);
  // Unset: automatic, nccl for CUDA jobs when LibTorch has it, gloo
  // otherwise. Backend::kNone means automatic too.
  ACCELERATE_ARG(std::optional<Backend>, backend);
  // Rendezvous and collective timeout (ACCELERATE_TIMEOUT, default 5 min).
  ACCELERATE_ARG(std::optional<std::chrono::milliseconds>, timeout);
  // Shape/dtype checks before every collective (ACCELERATE_DEBUG_MODE).
  ACCELERATE_ARG(std::optional<bool>, debug);
  // Sum CPU tensors through shared memory instead of Gloo when every rank
  // runs on this machine (ACCELERATE_SHARED_MEMORY_ALLREDUCE, default true;
  // docs/distributed.md, "Shared-memory all-reduce").
  ACCELERATE_ARG(std::optional<bool>, shared_memory_all_reduce);
};

struct JobState {
  int rank = 0;  // global rank, 0 .. world_size-1
  int world_size = 1;
  int local_rank = 0;        // rank on this node
  int local_world_size = 1;  // ranks on this node
  int node_rank = 0;         // GROUP_RANK / machine_rank
  int num_nodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;
  DeviceSpec device;
  Backend backend = Backend::kNone;  // kNone for one process
  std::chrono::milliseconds timeout = kDefaultTimeout;
  bool debug = false;
  bool shared_memory_all_reduce = true;
  bool use_cpu = false;
  // Gloo's network interface (GLOO_SOCKET_IFNAME); empty: the one towards
  // the master address, else Gloo's default.
  std::string gloo_socket_ifname;
  LaunchSource source = LaunchSource::kSingleProcess;
  // torchrun 2.x's agent serves the rendezvous store on MASTER_PORT itself
  // (TORCHELASTIC_USE_AGENT_STORE=True): every rank, rank 0 included, joins
  // it as a client instead of rank 0 hosting one.
  bool launcher_hosts_store = false;
  // How often the launcher restarted this job's processes
  // (TORCHELASTIC_RESTART_COUNT, set by torchrun and by `accelerate launch`).
  // A store the launcher hosts outlives each attempt; each attempt keeps its
  // keys apart from the previous attempts' (rendezvous_store_prefix()).
  int restart_count = 0;

  bool is_distributed() const { return world_size > 1; }
  bool is_main_process() const { return rank == 0; }
  bool is_local_main_process() const { return local_rank == 0; }
  bool is_last_process() const { return rank == world_size - 1; }
  // Where this attempt's keys live in a store the launcher hosts, PyTorch's
  // env:// spelling ("/worker/attempt_<restart_count>"), so that a restarted
  // group never reads a previous attempt's keys; empty when rank 0 hosts a
  // fresh store for each attempt.
  std::string rendezvous_store_prefix() const;

  // Parses `env`. Throws ConfigError with a one-line message naming the
  // variable for bad values: non-numbers, WORLD_SIZE < 1, RANK >= WORLD_SIZE,
  // LOCAL_RANK >= LOCAL_WORLD_SIZE, ports outside 1..65535, an unknown
  // backend, nccl without CUDA, a multi-node MPI job without MASTER_ADDR,
  // TORCHELASTIC_USE_AGENT_STORE other than True/False, or a restart count
  // that is not a whole number.
  static JobState from_environment(const Environment& env, const JobOptions& options = {},
                                   const Hardware& hardware = {});

  // One line for logs: "rank 1/4 (local 1/2, node 0/2) cpu gloo via torchrun".
  std::string describe() const;
};

// The default rendezvous port of a Slurm job, 20000 + SLURM_JOB_ID % 10000
// (below the kernel's ephemeral range), so that two jobs sharing a node do
// not both take 29500; nullopt outside Slurm. Throws ConfigError for a job
// id that is not a number. The launcher and srun-started programs agree.
std::optional<int> slurm_master_port(const Environment& env);

// First host of a Slurm node list: "node[07-09,12],gpu3" -> "node07".
// Throws ConfigError for a malformed list.
std::string first_host_in_slurm_nodelist(const std::string& nodelist);

// Tasks on node `node_id` from SLURM_TASKS_PER_NODE ("2(x3),1" -> 2,2,2,1).
// Throws ConfigError for a malformed value or a node it does not describe.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id);

}  // namespace accelerate
