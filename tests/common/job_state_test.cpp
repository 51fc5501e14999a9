// JobState::from_environment: every launcher's variables, their precedence,
// options over the environment, device and backend rules, and one-line
// errors that name the offending variable. Environments are plain maps, so
// nothing here touches the real process environment.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/common/job_state.h"
#include "common/job_state_test_support.h"

namespace accelerate {
namespace {

using std::chrono::milliseconds;
using namespace testing::job_state;

TEST(JobStateSources, NothingSetIsOnePlainProcess) {
  const JobState state = parse({});
  EXPECT_EQ(state.rank, 0);
  EXPECT_EQ(state.world_size, 1);
  EXPECT_EQ(state.local_rank, 0);
  EXPECT_EQ(state.local_world_size, 1);
  EXPECT_EQ(state.node_rank, 0);
  EXPECT_EQ(state.num_nodes, 1);
  EXPECT_EQ(state.master_addr, "127.0.0.1");
  EXPECT_EQ(state.master_port, 29500);
  EXPECT_EQ(state.backend, Backend::kNone);
  EXPECT_EQ(state.device, DeviceSpec{});
  EXPECT_EQ(state.timeout, std::chrono::minutes(5));
  EXPECT_FALSE(state.debug);
  EXPECT_FALSE(state.use_cpu);
  EXPECT_EQ(state.source, LaunchSource::kSingleProcess);
  EXPECT_FALSE(state.is_distributed());
  EXPECT_TRUE(state.is_main_process() && state.is_local_main_process() && state.is_last_process());
  EXPECT_EQ(state.describe(), "rank 0/1 (local 0/1, node 0/1) cpu none via single process");
}

TEST(JobStateSources, TorchrunWithEveryVariable) {
  const JobState state = parse({{"RANK", "5"},
                                {"WORLD_SIZE", "8"},
                                {"LOCAL_RANK", "1"},
                                {"LOCAL_WORLD_SIZE", "4"},
                                {"GROUP_RANK", "1"},
                                {"MASTER_ADDR", "10.0.0.1"},
                                {"MASTER_PORT", "1234"}});
  EXPECT_EQ(state.source, LaunchSource::kTorchrun);
  EXPECT_EQ(state.master_addr, "10.0.0.1");
  EXPECT_EQ(state.master_port, 1234);
  EXPECT_EQ(state.backend, Backend::kGloo);
  EXPECT_TRUE(state.is_distributed());
  EXPECT_FALSE(state.is_main_process() || state.is_last_process());
  EXPECT_EQ(state.describe(), "rank 5/8 (local 1/4, node 1/2) cpu gloo via torchrun");
}

// What PyPI's torchrun 2.15 gives a worker (seen: `torchrun --standalone`):
// its agent already serves the store on MASTER_PORT.
TEST(JobStateSources, TorchrunsAgentStoreIsJoinedInTheAttemptsSection) {
  Environment env = {{"RANK", "1"},
                     {"WORLD_SIZE", "2"},
                     {"MASTER_ADDR", "127.0.0.1"},
                     {"MASTER_PORT", "36207"},
                     {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                     {"TORCHELASTIC_RESTART_COUNT", "0"},
                     {"TORCHELASTIC_RUN_ID", "none"}};
  JobState state = parse(env);
  EXPECT_TRUE(state.launcher_hosts_store);
  EXPECT_EQ(state.restart_count, 0);
  EXPECT_EQ(state.rendezvous_store_prefix(), "/worker/attempt_0");
  env["TORCHELASTIC_RESTART_COUNT"] = "3";
  EXPECT_EQ(parse(env).rendezvous_store_prefix(), "/worker/attempt_3");
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  state = parse(env);
  EXPECT_FALSE(state.launcher_hosts_store);
  EXPECT_EQ(state.restart_count, 3);
  EXPECT_EQ(state.rendezvous_store_prefix(), "") << "rank 0 hosts a fresh store per attempt";
}

TEST(JobStateSources, WithoutTheAgentStoreRankZeroHosts) {
  const JobState state = parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_FALSE(state.launcher_hosts_store);
  EXPECT_EQ(state.restart_count, 0);
  EXPECT_EQ(state.rendezvous_store_prefix(), "");
}

TEST(JobStateErrors, BadAgentStoreVariablesNameThemselves) {
  const Environment base = {{"RANK", "0"}, {"WORLD_SIZE", "2"}};
  Environment env = base;
  env["TORCHELASTIC_USE_AGENT_STORE"] = "maybe";
  EXPECT_EQ(error_of(env), "TORCHELASTIC_USE_AGENT_STORE expects True or False, got 'maybe'");
  env = base;
  env["TORCHELASTIC_RESTART_COUNT"] = "-1";
  EXPECT_TRUE(contains(error_of(env), "TORCHELASTIC_RESTART_COUNT expects a whole number"))
      << error_of(env);
}

TEST(JobStateSources, RankAndWorldSizeAloneMeanOneNode) {
  const JobState state = parse({{"RANK", "3"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(state.master_addr, "127.0.0.1");
  EXPECT_TRUE(state.is_last_process());
  EXPECT_EQ(state.describe(), "rank 3/4 (local 3/4, node 0/1) cpu gloo via torchrun");
}

TEST(JobStateSources, LocalRankAndGroupRankDefaultFromLocalWorldSize) {
  EXPECT_EQ(
      parse({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h0"}})
          .describe(),
      "rank 3/4 (local 1/2, node 1/2) cpu gloo via torchrun");
}

TEST(JobStateSources, NodeCountRoundsUp) {
  EXPECT_EQ(parse({{"RANK", "4"},
                   {"WORLD_SIZE", "5"},
                   {"LOCAL_RANK", "0"},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"GROUP_RANK", "2"},
                   {"MASTER_ADDR", "h0"}})
                .describe(),
            "rank 4/5 (local 0/2, node 2/3) cpu gloo via torchrun");
}

TEST(JobStateSources, DescribeMatchesTheHeaderExample) {
  EXPECT_EQ(parse({{"RANK", "1"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"GROUP_RANK", "0"},
                   {"MASTER_ADDR", "h0"}})
                .describe(),
            "rank 1/4 (local 1/2, node 0/2) cpu gloo via torchrun");
}

struct MpiCase {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

class JobStateMpi : public ::testing::TestWithParam<MpiCase> {};

TEST_P(JobStateMpi, ReadsRanksAndDerivesTheNode) {
  const MpiCase& mpi = GetParam();
  const JobState state = parse({{mpi.rank, "3"},
                                {mpi.size, "4"},
                                {mpi.local_rank, "1"},
                                {mpi.local_size, "2"},
                                {"MASTER_ADDR", "head"}});
  EXPECT_EQ(state.source, LaunchSource::kMpi);
  EXPECT_EQ(state.describe(), "rank 3/4 (local 1/2, node 1/2) cpu gloo via mpi");
  EXPECT_EQ(state.master_addr, "head");
}

TEST_P(JobStateMpi, OneNodeNeedsNoMasterAddr) {
  const MpiCase& mpi = GetParam();
  const JobState state =
      parse({{mpi.rank, "1"}, {mpi.size, "2"}, {mpi.local_rank, "1"}, {mpi.local_size, "2"}});
  EXPECT_EQ(state.master_addr, "127.0.0.1");
  EXPECT_EQ(state.describe(), "rank 1/2 (local 1/2, node 0/1) cpu gloo via mpi");
}

TEST_P(JobStateMpi, SeveralNodesWithoutMasterAddrIsAnError) {
  const MpiCase& mpi = GetParam();
  const std::string message =
      error_of({{mpi.rank, "0"}, {mpi.size, "8"}, {mpi.local_rank, "0"}, {mpi.local_size, "4"}});
  EXPECT_TRUE(contains(message, "MASTER_ADDR is not set")) << message;
  EXPECT_TRUE(contains(message, std::string(mpi.size) + "=8")) << message;
  EXPECT_TRUE(contains(message, "2 nodes")) << message;
}

TEST_P(JobStateMpi, RankWithoutSizeIsAnError) {
  const MpiCase& mpi = GetParam();
  EXPECT_EQ(error_of({{mpi.rank, "0"}}),
            std::string(mpi.rank) + " is set but " + mpi.size + " is not; the launcher sets both");
}

INSTANTIATE_TEST_SUITE_P(
    Flavors, JobStateMpi,
    ::testing::Values(MpiCase{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                              "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                      MpiCase{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
                      MpiCase{"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
                              "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"}));

TEST(JobStateSources, PmiWithoutLocalRanksOutsideSlurmIsOneNode) {
  const JobState state = parse({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}});
  EXPECT_EQ(state.describe(), "rank 2/3 (local 2/3, node 0/1) cpu gloo via mpi");
}

TEST(JobStateSources, SrunTask) {
  const JobState state = parse(srun_task_3_of_4());
  EXPECT_EQ(state.source, LaunchSource::kSlurm);
  EXPECT_EQ(state.describe(), "rank 3/4 (local 1/2, node 1/2) cpu gloo via slurm");
  EXPECT_EQ(state.master_addr, "gpu07");
  EXPECT_EQ(state.master_port, 29500);
}

TEST(JobStateSources, SlurmBatchScriptIsOneProcess) {
  // What sbatch -N2 -n8 gives the batch script: no SLURM_STEP_ID.
  const JobState state = parse({{"SLURM_JOB_ID", "42"},
                                {"SLURM_PROCID", "0"},
                                {"SLURM_NTASKS", "8"},
                                {"SLURM_LOCALID", "0"},
                                {"SLURM_NNODES", "2"},
                                {"SLURM_NODEID", "0"},
                                {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                                {"SLURM_TASKS_PER_NODE", "4(x2)"}});
  EXPECT_EQ(state.source, LaunchSource::kSingleProcess);
  EXPECT_EQ(state.world_size, 1);
  EXPECT_EQ(state.backend, Backend::kNone);
  EXPECT_EQ(state.master_addr, "127.0.0.1");
}

TEST(JobStateSources, SlurmOldStepIdSpellingIsEnough) {
  EXPECT_EQ(parse(without(srun_task_3_of_4(), "SLURM_STEP_ID")).source, LaunchSource::kSlurm);
}

TEST(JobStateSources, SlurmStepValuesWinOverJobValues) {
  // srun -n 3 on nodes 3-4 of a 4-node, 16-task allocation.
  const JobState state = parse(with(srun_task_3_of_4(), {{"SLURM_NTASKS", "16"},
                                                         {"SLURM_STEP_NUM_TASKS", "3"},
                                                         {"SLURM_PROCID", "2"},
                                                         {"SLURM_LOCALID", "0"},
                                                         {"SLURM_NNODES", "4"},
                                                         {"SLURM_JOB_NODELIST", "a[1-4]"},
                                                         {"SLURM_STEP_NODELIST", "a[3-4]"},
                                                         {"SLURM_TASKS_PER_NODE", "4(x4)"},
                                                         {"SLURM_STEP_TASKS_PER_NODE", "2,1"}}));
  EXPECT_EQ(state.describe(), "rank 2/3 (local 0/1, node 1/2) cpu gloo via slurm");
  EXPECT_EQ(state.master_addr, "a3");
}

TEST(JobStateSources, SlurmUnevenTasksPerNode) {
  const JobState state = parse({{"SLURM_STEP_ID", "1"},
                                {"SLURM_PROCID", "6"},
                                {"SLURM_NTASKS", "7"},
                                {"SLURM_LOCALID", "0"},
                                {"SLURM_NNODES", "4"},
                                {"SLURM_NODEID", "3"},
                                {"SLURM_JOB_NODELIST", "n[1-4]"},
                                {"SLURM_TASKS_PER_NODE", "2(x3),1"}});
  EXPECT_EQ(state.describe(), "rank 6/7 (local 0/1, node 3/4) cpu gloo via slurm");
  EXPECT_EQ(state.master_addr, "n1");
}

TEST(JobStateSources, SlurmOneNodeUsesLoopbackAndMasterVariablesOverride) {
  Environment env = with(srun_task_3_of_4(), {{"SLURM_NNODES", "1"},
                                              {"SLURM_STEP_NUM_NODES", "1"},
                                              {"SLURM_NODEID", "0"},
                                              {"SLURM_LOCALID", "3"},
                                              {"SLURM_STEP_TASKS_PER_NODE", "4"}});
  EXPECT_EQ(parse(env).master_addr, "127.0.0.1");
  const JobState overridden =
      parse(with(srun_task_3_of_4(), {{"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "31337"}}));
  EXPECT_EQ(overridden.master_addr, "10.1.1.1");
  EXPECT_EQ(overridden.master_port, 31337);
  // The node list is only read for the address, so with MASTER_ADDR it may be odd.
  const Environment odd_list = {{"MASTER_ADDR", "h"}, {"SLURM_STEP_NODELIST", "x[1"}};
  EXPECT_EQ(parse(with(srun_task_3_of_4(), odd_list)).master_addr, "h");
}

// Two Slurm jobs on one node must not both rendezvous on 29500; the port
// matches the one `accelerate launch` derives under Slurm.
TEST(JobStateSources, SlurmDerivesTheDefaultPortFromTheJobId) {
  EXPECT_EQ(parse(srun_task_3_of_4()).master_port, kDefaultMasterPort) << "no job id: torchrun's";
  EXPECT_EQ(parse(with(srun_task_3_of_4(), {{"SLURM_JOB_ID", "123456"}})).master_port, 23456);
  EXPECT_EQ(parse(with(srun_task_3_of_4(), {{"SLURM_JOBID", "7"}})).master_port, 20007);
  EXPECT_EQ(parse(with(srun_task_3_of_4(), {{"SLURM_JOB_ID", "123456"}, {"MASTER_PORT", "31337"}}))
                .master_port,
            31337);
  EXPECT_THROW(parse(with(srun_task_3_of_4(), {{"SLURM_JOB_ID", "12x"}})), ConfigError);
  EXPECT_EQ(slurm_master_port({}), std::nullopt);
}

TEST(JobStatePrecedence, TorchrunBeatsMpiAndSlurm) {
  const Environment torchrun_and_mpi = {{"RANK", "1"},
                                        {"WORLD_SIZE", "2"},
                                        {"OMPI_COMM_WORLD_RANK", "0"},
                                        {"OMPI_COMM_WORLD_SIZE", "4"}};
  const JobState state = parse(with(srun_task_3_of_4(), torchrun_and_mpi));
  EXPECT_EQ(state.source, LaunchSource::kTorchrun);
  EXPECT_EQ(state.describe(), "rank 1/2 (local 1/2, node 0/1) cpu gloo via torchrun");
}

TEST(JobStatePrecedence, MpiWithLocalRanksBeatsSlurm) {
  // mpirun across several nodes of an allocation starts its daemons with
  // srun, so the ranks inherit a step whose SLURM_PROCID numbers daemons.
  const Environment mpirun = {{"OMPI_COMM_WORLD_RANK", "0"},
                              {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  const JobState state = parse(with(srun_task_3_of_4(), mpirun));
  EXPECT_EQ(state.describe(), "rank 0/2 (local 0/2, node 0/1) cpu gloo via mpi");
}

TEST(JobStatePrecedence, SrunPmi2WithoutLocalRanksUsesSlurm) {
  // srun --mpi=pmi2 sets PMI_RANK and PMI_SIZE but no local ranks.
  const JobState state = parse(with(srun_task_3_of_4(), {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}}));
  EXPECT_EQ(state.describe(), "rank 3/4 (local 1/2, node 1/2) cpu gloo via slurm");
}

}  // namespace
}  // namespace accelerate
