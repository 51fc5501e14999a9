// JobState's settings, devices and backends, its one-line errors for bad
// input, and the Slurm list parsers (job_state_test.cpp has the sources).
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

TEST(JobStateSettings, BooleansAcceptCommonSpellings) {
  const std::vector<std::pair<std::string, bool>> spellings = {
      {"1", true},  {"true", true},   {"TRUE", true}, {"Yes", true},
      {"0", false}, {"false", false}, {"No", false}};
  for (const auto& [text, expected] : spellings) {
    EXPECT_EQ(parse({{"ACCELERATE_USE_CPU", text}}).use_cpu, expected) << text;
    EXPECT_EQ(parse({{"ACCELERATE_DEBUG_MODE", text}}).debug, expected) << text;
  }
}

TEST(JobStateSettings, SharedMemoryAllReduceIsOnUnlessTurnedOff) {
  EXPECT_TRUE(parse({}).shared_memory_all_reduce);
  EXPECT_TRUE(parse({{"ACCELERATE_SHARED_MEMORY_ALLREDUCE", "yes"}}).shared_memory_all_reduce);
  EXPECT_FALSE(parse({{"ACCELERATE_SHARED_MEMORY_ALLREDUCE", "0"}}).shared_memory_all_reduce);
  EXPECT_TRUE(parse({{"ACCELERATE_SHARED_MEMORY_ALLREDUCE", "0"}},
                    JobOptions().shared_memory_all_reduce(true))
                  .shared_memory_all_reduce);
  EXPECT_FALSE(parse({}, JobOptions().shared_memory_all_reduce(false)).shared_memory_all_reduce);
}

TEST(JobStateSettings, TimeoutInSecondsWithDecimals) {
  EXPECT_EQ(parse({{"ACCELERATE_TIMEOUT", "30"}}).timeout, milliseconds(30000));
  EXPECT_EQ(parse({{"ACCELERATE_TIMEOUT", "2.5"}}).timeout, milliseconds(2500));
  EXPECT_EQ(parse({{"ACCELERATE_TIMEOUT", "0.125"}}).timeout, milliseconds(125));
  EXPECT_EQ(parse({{"ACCELERATE_TIMEOUT", "007.5"}}).timeout, milliseconds(7500));
  EXPECT_EQ(parse({{"ACCELERATE_TIMEOUT", "86400"}}).timeout, std::chrono::hours(24));
}

TEST(JobStateSettings, OptionsWinOverTheEnvironment) {
  const Environment env = {{"RANK", "1"},
                           {"WORLD_SIZE", "2"},
                           {"ACCELERATE_USE_CPU", "1"},
                           {"ACCELERATE_DEBUG_MODE", "yes"},
                           {"ACCELERATE_TIMEOUT", "10"}};
  const Hardware gpus{2, true};
  const JobState from_env = parse(env, {}, gpus);
  EXPECT_TRUE(from_env.use_cpu && from_env.debug);
  EXPECT_EQ(from_env.device, DeviceSpec{});
  EXPECT_EQ(from_env.timeout, milliseconds(10000));
  const JobState from_options = parse(
      env, JobOptions().cpu(false).debug(false).timeout(milliseconds(1500)).backend(Backend::kGloo),
      gpus);
  EXPECT_FALSE(from_options.use_cpu || from_options.debug);
  EXPECT_EQ(from_options.device.str(), "cuda:1");
  EXPECT_EQ(from_options.timeout, milliseconds(1500));
  EXPECT_EQ(from_options.backend, Backend::kGloo);
  // A set option means the variable is not consulted at all.
  EXPECT_TRUE(parse({{"ACCELERATE_USE_CPU", "maybe"}}, JobOptions().cpu(true)).use_cpu);
}

TEST(JobStateDevice, CudaDeviceIsTheLocalRank) {
  const Environment env = {
      {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}};
  const JobState state = parse(env, {}, Hardware{2, true});
  EXPECT_EQ(state.device, (DeviceSpec{DeviceSpec::Type::kCUDA, 1}));
  EXPECT_EQ(state.device.str(), "cuda:1");
  EXPECT_EQ(state.backend, Backend::kNccl);
  EXPECT_EQ(state.describe(), "rank 3/4 (local 1/2, node 1/2) cuda:1 nccl via torchrun");
  EXPECT_EQ(parse({}, {}, Hardware{1, true}).device.str(), "cuda:0");
  EXPECT_EQ(parse({}, {}, Hardware{1, true}).backend, Backend::kNone);
}

TEST(JobStateDevice, MoreLocalRanksThanGpusIsAnError) {
  const std::string message =
      error_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"}},
               {}, Hardware{2, true});
  EXPECT_EQ(message,
            "LOCAL_RANK=2 needs cuda:2 but only 2 CUDA device(s) are visible; start at most 2 "
            "process(es) per node, or set ACCELERATE_USE_CPU=1");
}

TEST(JobStateBackend, AutomaticChoice) {
  const Environment two = {{"RANK", "0"}, {"WORLD_SIZE", "2"}};
  EXPECT_EQ(parse(two).backend, Backend::kGloo);
  EXPECT_EQ(parse(two, {}, Hardware{2, true}).backend, Backend::kNccl);
  EXPECT_EQ(parse(two, {}, Hardware{2, false}).backend, Backend::kGloo);
  EXPECT_EQ(parse(two, JobOptions().cpu(true), Hardware{2, true}).backend, Backend::kGloo);
  EXPECT_EQ(parse(two, JobOptions().backend(Backend::kNccl), Hardware{2, true}).backend,
            Backend::kNccl);
  EXPECT_EQ(parse(two, JobOptions().backend(Backend::kGloo), Hardware{2, true}).backend,
            Backend::kGloo);
  // kNone asks for the automatic choice, as an unset option does.
  EXPECT_EQ(parse(two, JobOptions().backend(Backend::kNone), Hardware{2, true}).backend,
            Backend::kNccl);
  // One CPU process needs no backend.
  EXPECT_EQ(parse({}, JobOptions().backend(Backend::kNccl)).backend, Backend::kNone);
}

TEST(JobStateBackend, RejectedRequests) {
  const Environment two = {{"RANK", "0"}, {"WORLD_SIZE", "2"}};
  EXPECT_TRUE(contains(error_of(two, JobOptions().backend(Backend::kNccl)), "needs CUDA"));
  EXPECT_TRUE(
      contains(error_of(two, JobOptions().backend(Backend::kNccl).cpu(true), Hardware{2, true}),
               "needs CUDA"));
  EXPECT_TRUE(contains(error_of(two, JobOptions().backend(Backend::kNccl), Hardware{2, false}),
                       "has no NCCL"));
}

struct BadInput {
  Environment env;
  std::string expected;  // the message, or a part of it that names the variable and value
};

class JobStateBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(JobStateBadInput, OneLineErrorNamingTheVariable) {
  const std::string message = error_of(GetParam().env);
  EXPECT_TRUE(contains(message, GetParam().expected)) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

const Environment kTwoNodeSrun = srun_task_3_of_4();

INSTANTIATE_TEST_SUITE_P(
    Cases, JobStateBadInput,
    ::testing::Values(
        BadInput{{{"RANK", "1"}, {"WORLD_SIZE", "4x"}},
                 "WORLD_SIZE expects a whole number, got '4x'"},
        BadInput{{{"RANK", " 1"}, {"WORLD_SIZE", "4"}}, "RANK expects a whole number, got ' 1'"},
        BadInput{{{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}},
                 "WORLD_SIZE expects a whole number up to 2147483647, got '99999999999'"},
        BadInput{{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0 must be at least 1"},
        BadInput{{{"RANK", "-1"}, {"WORLD_SIZE", "4"}}, "RANK=-1 must not be negative"},
        BadInput{{{"RANK", "5"}, {"WORLD_SIZE", "4"}},
                 "RANK=5 is out of range for WORLD_SIZE=4 (ranks are 0..3)"},
        BadInput{{{"RANK", "1"}}, "RANK is set but WORLD_SIZE is not"},
        BadInput{{{"WORLD_SIZE", "2"}}, "WORLD_SIZE is set but RANK is not"},
        BadInput{{{"RANK", "1"},
                  {"WORLD_SIZE", "4"},
                  {"LOCAL_RANK", "2"},
                  {"LOCAL_WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "h"}},
                 "LOCAL_RANK=2 is out of range for LOCAL_WORLD_SIZE=2 (local ranks are 0..1)"},
        BadInput{{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "8"}},
                 "LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4"},
        BadInput{{{"RANK", "1"},
                  {"WORLD_SIZE", "4"},
                  {"LOCAL_WORLD_SIZE", "2"},
                  {"GROUP_RANK", "2"},
                  {"MASTER_ADDR", "h"}},
                 "GROUP_RANK=2 is out of range for 2 nodes (WORLD_SIZE=4 over LOCAL_WORLD_SIZE=2)"},
        BadInput{{{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}},
                 "LOCAL_RANK=1 with RANK=3 means the job spans several nodes, but LOCAL_WORLD_SIZE "
                 "is not set"},
        BadInput{{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}},
                 "the torchrun job spans 2 nodes (WORLD_SIZE=4 over LOCAL_WORLD_SIZE=2) but "
                 "MASTER_ADDR is not set"},
        BadInput{{{"MASTER_PORT", "0"}}, "MASTER_PORT=0 is outside 1..65535"},
        BadInput{{{"MASTER_PORT", "70000"}}, "MASTER_PORT=70000 is outside 1..65535"},
        BadInput{{{"MASTER_PORT", "http"}}, "MASTER_PORT expects a whole number, got 'http'"},
        BadInput{{{"ACCELERATE_USE_CPU", "maybe"}},
                 "ACCELERATE_USE_CPU expects true or false (or 1/0, yes/no), got 'maybe'"},
        BadInput{{{"ACCELERATE_DEBUG_MODE", "on"}},
                 "ACCELERATE_DEBUG_MODE expects true or false (or 1/0, yes/no), got 'on'"},
        BadInput{{{"ACCELERATE_SHARED_MEMORY_ALLREDUCE", "fast"}},
                 "ACCELERATE_SHARED_MEMORY_ALLREDUCE expects true or false (or 1/0, yes/no), got "
                 "'fast'"},
        BadInput{
            {{"ACCELERATE_TIMEOUT", "0"}},
            "ACCELERATE_TIMEOUT expects a positive number of seconds (e.g. 300 or 2.5), got '0'"},
        BadInput{
            {{"ACCELERATE_TIMEOUT", "-5"}},
            "ACCELERATE_TIMEOUT expects a positive number of seconds (e.g. 300 or 2.5), got '-5'"},
        BadInput{{{"ACCELERATE_TIMEOUT", "2.5s"}},
                 "ACCELERATE_TIMEOUT expects a positive number of seconds (e.g. 300 or 2.5), got "
                 "'2.5s'"},
        BadInput{{{"ACCELERATE_TIMEOUT", "1.2.3"}},
                 "ACCELERATE_TIMEOUT expects a positive number of seconds (e.g. 300 or 2.5), got "
                 "'1.2.3'"},
        BadInput{{{"ACCELERATE_TIMEOUT", "99999999999"}},
                 "ACCELERATE_TIMEOUT expects a positive number of seconds (e.g. 300 or 2.5), got "
                 "'99999999999'"},
        BadInput{{{"OMPI_COMM_WORLD_RANK", "2"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                  {"MASTER_ADDR", "h"}},
                 "OMPI_COMM_WORLD_LOCAL_RANK=2 is out of range for OMPI_COMM_WORLD_LOCAL_SIZE=2"},
        BadInput{{{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}},
                 "MPI_LOCALRANKID is set but MPI_LOCALNRANKS is not"},
        BadInput{with(kTwoNodeSrun, {{"SLURM_PROCID", "x"}}),
                 "SLURM_PROCID expects a whole number, got 'x'"},
        BadInput{with(kTwoNodeSrun, {{"SLURM_NODEID", "2"}}),
                 "SLURM_NODEID=2 is out of range for 2 nodes (SLURM_STEP_NUM_NODES=2) (node ids "
                 "are 0..1)"},
        BadInput{with(kTwoNodeSrun, {{"SLURM_LOCALID", "2"}}),
                 "SLURM_LOCALID=2 is out of range for 2 tasks on node 1 "
                 "(SLURM_STEP_TASKS_PER_NODE='2(x2)')"},
        BadInput{with(kTwoNodeSrun, {{"SLURM_STEP_TASKS_PER_NODE", "2(x2"}}),
                 "SLURM_STEP_TASKS_PER_NODE='2(x2' is malformed at '2(x2'"},
        BadInput{
            with(kTwoNodeSrun, {{"SLURM_STEP_TASKS_PER_NODE", "4"}}),
            "SLURM_STEP_TASKS_PER_NODE='4' describes 1 node(s), so it has no entry for node 1"},
        BadInput{with(kTwoNodeSrun, {{"SLURM_STEP_NODELIST", "gpu[07-08"}}),
                 "SLURM_STEP_NODELIST='gpu[07-08' is malformed: '[' is never closed"},
        BadInput{
            with(without(kTwoNodeSrun, "SLURM_STEP_NODELIST"), {{"SLURM_JOB_NODELIST", "gpu07]"}}),
            "SLURM_JOB_NODELIST='gpu07]' is malformed: ']' without '['"},
        BadInput{without(kTwoNodeSrun, "SLURM_LOCALID"),
                 "SLURM_LOCALID is not set although SLURM_STEP_ID is"},
        BadInput{without(without(kTwoNodeSrun, "SLURM_STEP_NUM_TASKS"), "SLURM_NTASKS"),
                 "SLURM_STEP_NUM_TASKS (or SLURM_NTASKS) is not set although SLURM_STEP_ID is"}));

TEST(SlurmNodelist, FirstHost) {
  EXPECT_EQ(first_host_in_slurm_nodelist("node07"), "node07");
  EXPECT_EQ(first_host_in_slurm_nodelist("node[07-09,12]"), "node07");
  EXPECT_EQ(first_host_in_slurm_nodelist("node[07-09],gpu[1-2]"), "node07");
  EXPECT_EQ(first_host_in_slurm_nodelist("node[12,07-09]"), "node12");  // Slurm's order, not sorted
  EXPECT_EQ(first_host_in_slurm_nodelist("a,b"), "a");
  EXPECT_EQ(first_host_in_slurm_nodelist("node[007-010]"), "node007");
  EXPECT_EQ(first_host_in_slurm_nodelist("gpu[3]"), "gpu3");
  EXPECT_EQ(first_host_in_slurm_nodelist("rack[2-3]-n[05-06]"), "rack2-n05");
  EXPECT_EQ(first_host_in_slurm_nodelist("login.cluster.example.org,c1"),
            "login.cluster.example.org");
}

TEST(SlurmNodelist, MalformedListsAreErrors) {
  for (const std::string bad :
       {"", "node[07-09", "node07]", "node[]", "node[a-b]", "node[09-07]", "node[1,,2]", "a,,b",
        ",a", "a,", "node[[1]]", "node 1", "node[1-2]]"}) {
    try {
      first_host_in_slurm_nodelist(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& error) {
      EXPECT_TRUE(contains(error.what(), "Slurm node list '" + bad + "'")) << error.what();
    }
  }
}

TEST(SlurmTasksPerNode, ExpandsRepeats) {
  const std::vector<int> expected = {2, 2, 2, 1};
  for (int node = 0; node < 4; ++node)
    EXPECT_EQ(slurm_tasks_on_node("2(x3),1", node), expected[node]);
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("1,3(x2),2", 2), 3);
  EXPECT_EQ(slurm_tasks_on_node("1,3(x2),2", 3), 2);
  EXPECT_EQ(slurm_tasks_on_node("8(x100)", 99), 8);
}

TEST(SlurmTasksPerNode, OutOfRangeAndMalformedAreErrors) {
  EXPECT_THROW(slurm_tasks_on_node("2(x3),1", 4), ConfigError);
  EXPECT_THROW(slurm_tasks_on_node("2(x3),1", -1), ConfigError);
  for (const std::string bad :
       {"", "2(x3", "2(3)", "x", "2,,1", "0", "2(x0)", "-1", "2(x)", "2 (x3)", "2(x3)1"}) {
    EXPECT_THROW(slurm_tasks_on_node(bad, 0), ConfigError) << bad;
  }
  try {
    slurm_tasks_on_node("2(x3),1", 4);
  } catch (const ConfigError& error) {
    EXPECT_STREQ(
        error.what(),
        "Slurm tasks per node '2(x3),1' describes 4 node(s), so it has no entry for node 4");
  }
}

TEST(JobStateNames, SourcesAndDevices) {
  EXPECT_STREQ(to_string(LaunchSource::kSingleProcess), "single process");
  EXPECT_STREQ(to_string(LaunchSource::kTorchrun), "torchrun");
  EXPECT_STREQ(to_string(LaunchSource::kMpi), "mpi");
  EXPECT_STREQ(to_string(LaunchSource::kSlurm), "slurm");
  EXPECT_EQ(DeviceSpec{}.str(), "cpu");
  EXPECT_EQ((DeviceSpec{DeviceSpec::Type::kCUDA, 3}.str()), "cuda:3");
}

}  // namespace
}  // namespace accelerate
