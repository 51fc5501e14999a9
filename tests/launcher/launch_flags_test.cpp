// The flags of Accelerate's launch, their checks, and where each value comes
// from (flag > Slurm > config file > default): pure functions, no processes.
#include <gtest/gtest.h>

#include <algorithm>

#include "launcher/child_environment.h"
#include "launcher/launch_errors.h"
#include "launcher/launch_options.h"
#include "launcher/launch_test_support.h"
#include "launcher/slurm_defaults.h"

namespace accelerate::launcher {
namespace {

std::string with_dashes(std::string flag) {
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// Every flag Accelerate's launch has (plus --dry_run), with a value where it takes
// one, and how the parsed options show it.
struct FlagCase {
  std::vector<std::string> args;
  std::string name;
  std::string shown;
};
const std::vector<FlagCase> kEveryFlag = {
    {{"--config_file", "c.yaml"}, "config_file", "c.yaml"},
    {{"--cpu"}, "cpu", "true"},
    {{"--multi_gpu"}, "multi_gpu", "true"},
    {{"--mixed_precision", "bf16"}, "mixed_precision", "bf16"},
    {{"--num_processes", "4"}, "num_processes", "4"},
    {{"--num_machines", "2"}, "num_machines", "2"},
    {{"--machine_rank", "1"}, "machine_rank", "1"},
    {{"--main_process_ip", "10.0.0.1"}, "main_process_ip", "10.0.0.1"},
    {{"--main_process_port", "1234"}, "main_process_port", "1234"},
    {{"--same_network"}, "same_network", "true"},
    {{"--rdzv_backend", "static"}, "rdzv_backend", "static"},
    {{"--rdzv_conf", "timeout=60"}, "rdzv_conf", "timeout=60"},
    {{"--max_restarts", "3"}, "max_restarts", "3"},
    {{"--monitor_interval", "0.5"}, "monitor_interval", "0.5"},
    {{"--num_cpu_threads_per_process", "2"}, "num_cpu_threads_per_process", "2"},
    {{"--gpu_ids", "0,2"}, "gpu_ids", "0,2"},
    {{"--gradient_accumulation_steps", "4"}, "gradient_accumulation_steps", "4"},
    {{"--debug"}, "debug", "true"},
    {{"--module"}, "module", "true"},
    {{"--no_python"}, "no_python", "true"},
    {{"--quiet"}, "quiet", "true"},
    {{"--tee", "3"}, "tee", "3"},
    {{"--log_dir", "logs"}, "log_dir", "logs"},
    {{"--mpirun_hostfile", "hosts"}, "mpirun_hostfile", "hosts"},
    {{"--dry_run"}, "dry_run", "true"},
    {{"--use_deepspeed"}, "use_deepspeed", "true"},
    {{"--zero_stage", "1"}, "zero_stage", "1"},
    {{"--deepspeed_config_file", "ds.json"}, "deepspeed_config_file", "ds.json"},
    {{"--offload_optimizer_device", "CPU"}, "offload_optimizer_device", "cpu"},
    {{"--offload_param_device", "none"}, "offload_param_device", "none"},
    {{"--gradient_clipping", "1"}, "gradient_clipping", "1.0"},
    {{"--zero3_init_flag", "True"}, "zero3_init_flag", "true"},
    {{"--zero3_save_16bit_model", "no"}, "zero3_save_16bit_model", "false"},
    {{"--use_fsdp"}, "use_fsdp", "true"},
    {{"--fsdp_sharding_strategy", "2"}, "fsdp_sharding_strategy", "SHARD_GRAD_OP"},
    {{"--fsdp_reshard_after_forward", "False"}, "fsdp_reshard_after_forward", "false"},
    {{"--fsdp_version", "2"}, "fsdp_version", "2"},
    {{"--fsdp_auto_wrap_policy", "size_based_wrap"}, "fsdp_auto_wrap_policy", "SIZE_BASED_WRAP"},
    {{"--fsdp_transformer_layer_cls_to_wrap", "Block,Mlp"},
     "fsdp_transformer_layer_cls_to_wrap",
     "Block,Mlp"},
    {{"--fsdp_min_num_params", "2000"}, "fsdp_min_num_params", "2000"},
    {{"--fsdp_backward_prefetch", "backward_post"}, "fsdp_backward_prefetch", "BACKWARD_POST"},
    {{"--fsdp_forward_prefetch", "true"}, "fsdp_forward_prefetch", "true"},
    {{"--fsdp_offload_params", "false"}, "fsdp_offload_params", "false"},
    {{"--fsdp_state_dict_type", "FULL_STATE_DICT"}, "fsdp_state_dict_type", "FULL_STATE_DICT"},
    {{"--fsdp_cpu_ram_efficient_loading", "True"}, "fsdp_cpu_ram_efficient_loading", "true"},
    {{"--fsdp_sync_module_states", "0"}, "fsdp_sync_module_states", "false"},
    {{"--use_parallelism_config"}, "use_parallelism_config", "true"},
    {{"--parallelism_config_dp_replicate_size", "2"}, "parallelism_config_dp_replicate_size", "2"},
    {{"--parallelism_config_dp_shard_size", "4"}, "parallelism_config_dp_shard_size", "4"},
    {{"--parallelism_config_sp_size", "2"}, "parallelism_config_sp_size", "2"},
    {{"--parallelism_config_sp_backend", "DeepSpeed"},
     "parallelism_config_sp_backend",
     "deepspeed"},
    {{"--parallelism_config_tp_size", "1"}, "parallelism_config_tp_size", "1"},
    {{"--parallelism_config_tp_sequence_parallel", "True"},
     "parallelism_config_tp_sequence_parallel",
     "true"},
    {{"--parallelism_config_cp_size", "1"}, "parallelism_config_cp_size", "1"},
};

TEST(LaunchFlags, EveryFlagInBothSpellings) {
  for (const auto& flag : kEveryFlag) {
    for (bool dashes : {false, true}) {
      std::vector<std::string> args = flag.args;
      if (dashes) args[0] = with_dashes(args[0]);
      args.push_back("prog");
      LaunchOptions options = parse(args);
      EXPECT_EQ(options.source_of(flag.name), OptionSource::kFlag) << args[0];
      EXPECT_EQ(find_launch_flag(flag.name)->show(options), flag.shown) << args[0];
      EXPECT_EQ(options.program, "prog");
    }
  }
  EXPECT_EQ(kEveryFlag.size(), launch_flag_table().size());  // and the table has no others
  EXPECT_TRUE(parse({"-m", "pkg"}).module);
  EXPECT_TRUE(parse({"-q", "prog"}).quiet);
}

TEST(LaunchFlags, BadValuesSayWhatToChange) {
  EXPECT_EQ(usage_error_of({"--rdzv_backend", "c10d", "p"}),
            "--rdzv_backend 'c10d' is not supported: accelerate-cpp has only the static rendezvous "
            "(--rdzv_backend static, with --main_process_ip/--main_process_port)");
  EXPECT_EQ(usage_error_of({"--rdzv-conf", "read_timeout=5", "p"}),
            "--rdzv-conf item 'read_timeout=5' is not supported; the static rendezvous understands "
            "timeout=SECONDS (or join_timeout=SECONDS)");
  EXPECT_EQ(usage_error_of({"--rdzv_conf", "timeout=0", "p"}),
            "--rdzv_conf timeout expects a positive number of seconds (e.g. 300 or 2.5), got '0'");
  EXPECT_EQ(usage_error_of({"--gpu_ids", "0,,1", "p"}),
            "--gpu_ids expects 'all' or GPU indices separated by commas (e.g. 0,1), got '0,,1'");
  EXPECT_EQ(usage_error_of({"--gpu_ids", "1,1", "p"}), "--gpu_ids lists GPU 1 twice");
  EXPECT_EQ(usage_error_of({"--max_restarts", "-1", "p"}),
            "--max_restarts expects a whole number from 0 to 1000000, got '-1'");
  EXPECT_EQ(usage_error_of({"--monitor_interval", "soon", "p"}),
            "--monitor_interval expects a number of seconds (e.g. 5 or 0.5), got 'soon'");
  EXPECT_EQ(usage_error_of({"--tee", "4", "--log_dir", "d", "p"}),
            "--tee expects 0, 1 (stdout), 2 (stderr) or 3 (both), got '4'");
  EXPECT_EQ(usage_error_of({"--tee", "1", "p"}),
            "--tee chooses what goes to the log files: give --log_dir DIR too");
  EXPECT_EQ(usage_error_of({"--cpu", "--multi_gpu", "p"}),
            "--cpu and --multi_gpu conflict: choose CPU processes (--cpu) or one process per GPU");
  EXPECT_EQ(
      usage_error_of({"--multi_gpu", "p"}),
      "--multi_gpu: no NVIDIA GPU is visible on this machine; use --cpu --num_processes N to run N "
      "processes on the CPU");
  EXPECT_EQ(
      usage_error_of(
          {"--mpirun_hostfile", "h", "--num_machines", "2", "--main_process_ip", "10.0.0.1", "p"}),
      "--mpirun_hostfile starts the processes of every machine from here; drop --num_machines (the "
      "hostfile lists the machines) and run one launcher only");
}

TEST(LaunchFlags, NumProcessesCountsEveryMachine) {
  EXPECT_EQ(
      usage_error_of(
          {"--num_processes", "5", "--num_machines", "2", "--main_process_ip", "10.0.0.1", "p"}),
      "--num_processes 5 is not divisible by --num_machines 2: it counts the processes of all "
      "machines, and every machine starts the same number; use e.g. --num_processes 4 for 2 per "
      "machine");
  LaunchOptions options = parse({"--num_processes", "4", "--num_machines", "2", "--machine_rank",
                                 "1", "--main_process_ip", "10.0.0.1", "p"});
  resolve_launch_options(options, MachineFacts{});
  EXPECT_EQ(options.local_processes(), 2);
  EXPECT_EQ(global_rank(options, 0), 2);
  EXPECT_EQ(build_child_environment(options, 1, {}, 4).at("RANK"), "3");
  EXPECT_EQ(build_child_environment(options, 1, {}, 4).at("WORLD_SIZE"), "4");
  EXPECT_EQ(build_child_environment(options, 1, {}, 4).at("LOCAL_WORLD_SIZE"), "2");

  // The default is one process per visible GPU on every machine.
  LaunchOptions gpus = parse({"--num_machines", "3", "--main_process_ip", "10.0.0.1", "p"});
  resolve_launch_options(gpus, MachineFacts{2, 8});
  EXPECT_EQ(gpus.num_processes, 6);
}

TEST(LaunchFlags, GpuIdsBecomeCudaVisibleDevicesAndPickTheProcessCount) {
  MachineFacts four_gpus{4, 8};
  LaunchOptions two = parse({"--gpu_ids", "1,3", "p"});
  resolve_launch_options(two, four_gpus);
  EXPECT_EQ(two.num_processes, 2);
  Environment parent = {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
  EXPECT_EQ(build_child_environment(two, 0, parent, 8).at("CUDA_VISIBLE_DEVICES"), "1,3");

  LaunchOptions all = parse({"--gpu_ids", "all", "p"});
  resolve_launch_options(all, four_gpus);
  EXPECT_EQ(all.num_processes, 4);
  EXPECT_EQ(build_child_environment(all, 0, parent, 8).at("CUDA_VISIBLE_DEVICES"), "0,1,2,3");
  EXPECT_EQ(build_child_environment(all, 0, {}, 8).count("CUDA_VISIBLE_DEVICES"), 0u);
}

// HIP reads CUDA_VISIBLE_DEVICES only when HIP_VISIBLE_DEVICES is unset, so
// an inherited HIP list gets the flag's GPUs too; none is added otherwise.
TEST(LaunchFlags, GpuIdsAlsoReplaceAnInheritedHipVisibleDevices) {
  LaunchOptions two = parse({"--gpu_ids", "1,3", "p"});
  resolve_launch_options(two, MachineFacts{8, 8});
  const Environment amd_parent = {{"ROCR_VISIBLE_DEVICES", "0,1,2,3"},
                                  {"HIP_VISIBLE_DEVICES", "0,1,2,3"}};
  const Environment child = build_child_environment(two, 0, amd_parent, 8);
  EXPECT_EQ(child.at("HIP_VISIBLE_DEVICES"), "1,3");
  EXPECT_EQ(child.at("CUDA_VISIBLE_DEVICES"), "1,3");
  EXPECT_EQ(child.at("ROCR_VISIBLE_DEVICES"), "0,1,2,3");  // the indices count within it
  EXPECT_EQ(build_child_environment(two, 0, {}, 8).count("HIP_VISIBLE_DEVICES"), 0u);
}

TEST(LaunchFlags, RestartCountAndRendezvousTimeoutReachTheRanks) {
  LaunchOptions options = parse({"--max_restarts", "2", "--rdzv_conf", "join_timeout=90", "p"});
  resolve_launch_options(options, MachineFacts{});
  Environment first = build_child_environment(options, 0, {}, 1);
  EXPECT_EQ(first.at("TORCHELASTIC_RESTART_COUNT"), "0");
  EXPECT_EQ(first.at("ACCELERATE_RESTART_COUNT"), "0");
  EXPECT_EQ(first.at("TORCHELASTIC_MAX_RESTARTS"), "2");
  EXPECT_EQ(first.at("ACCELERATE_TIMEOUT"), "90");
  Environment second = build_child_environment(options, 0, {}, 1, 2);
  EXPECT_EQ(second.at("TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_EQ(second.at("ACCELERATE_RESTART_COUNT"), "2");
}

// What --config_file does with a file's values (src/launcher/config_application.h):
// each goes through the table row, only onto options still at their default.
void apply_like_a_config_file(LaunchOptions& options,
                              const std::map<std::string, std::string>& values) {
  for (const auto& [key, value] : values) {
    if (options.source_of(key) != OptionSource::kDefault) continue;
    find_launch_flag(key)->apply(options, "file:1: key '" + key + "'", value);
    options.sources[key] = OptionSource::kConfigFile;
  }
}

TEST(LaunchFlags, PrecedenceIsFlagThenSlurmThenConfigFileThenDefault) {
  // Each option set by some of the layers (precedence: docs/launching.md).
  LaunchOptions options = parse({"--num_processes", "4", "--main_process_port", "1111", "p"});
  Environment slurm = {{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "0"},
                       {"SLURM_NNODES", "2"},    {"SLURM_NTASKS", "2"},
                       {"SLURM_NODEID", "1"},    {"SLURM_JOB_NODELIST", "node[07-08]"}};
  apply_slurm_defaults(options, slurm);
  apply_like_a_config_file(options, {{"num_processes", "8"},  // flag wins
                                     {"main_process_port", "2222"},
                                     {"num_machines", "1"},        // Slurm wins
                                     {"mixed_precision", "bf16"},  // file wins over the default
                                     {"debug", "false"}});
  apply_slurm_port(options, slurm);  // a port the flag (or file) gave stays
  resolve_launch_options(options, MachineFacts{});
  auto lines = describe_effective_settings(options);
  for (const char* expected :
       {"num_processes = 4 (flag)", "main_process_port = 1111 (flag)", "num_machines = 2 (slurm)",
        "machine_rank = 1 (slurm)", "main_process_ip = node07 (slurm)",
        "mixed_precision = bf16 (config file)", "debug = false (config file)",
        "gradient_accumulation_steps = (unset) (default)"}) {
    EXPECT_NE(std::find(lines.begin(), lines.end(), expected), lines.end()) << expected;
  }
}

TEST(LaunchSlurm, StepValuesFillWhatFlagsLeaveOpen) {
  EXPECT_EQ(slurm_default_port({{"SLURM_JOB_ID", "123456"}}), 23456);
  EXPECT_EQ(slurm_default_port({}), std::nullopt);

  Environment step = {{"SLURM_JOB_ID", "77"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_STEP_NUM_NODES", "3"},
                      {"SLURM_STEP_NUM_TASKS", "3"},
                      {"SLURM_NODEID", "2"},
                      {"SLURM_STEP_NODELIST", "gpu[3-5]"},
                      {"SLURM_JOB_NODELIST", "gpu[1-9]"},
                      {"SLURM_NNODES", "9"}};
  LaunchOptions options = parse({"--machine_rank", "0", "p"});
  EXPECT_TRUE(apply_slurm_defaults(options, step).empty());
  apply_slurm_port(options, step);
  EXPECT_EQ(options.num_machines, 3);          // the step's nodes, not the job's
  EXPECT_EQ(options.machine_rank, 0);          // the flag wins
  EXPECT_EQ(options.main_process_ip, "gpu3");  // the step's first node
  EXPECT_EQ(options.main_process_port, 20077);

  Environment two_per_node = step;
  two_per_node["SLURM_STEP_NUM_TASKS"] = "6";
  LaunchOptions too_many = parse({"p"});
  try {
    apply_slurm_defaults(too_many, two_per_node);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& error) {
    EXPECT_EQ(std::string(error.what())
                  .rfind("srun started 6 copies of accelerate launch on 3 node(s) "
                         "(SLURM_STEP_NUM_TASKS); start exactly one per node",
                         0),
              0u)
        << error.what();
  }

  // A port from the config file is a choice; Slurm's only keeps jobs apart.
  LaunchOptions from_file = parse({"p"});
  apply_like_a_config_file(from_file, {{"main_process_port", "2222"}});
  apply_slurm_port(from_file, step);
  EXPECT_EQ(from_file.main_process_port, 2222);

  // In the batch script (no step), only the port comes from Slurm.
  LaunchOptions batch = parse({"p"});
  auto notes = apply_slurm_defaults(batch, {{"SLURM_JOB_ID", "5"}, {"SLURM_NNODES", "2"}});
  apply_slurm_port(batch, {{"SLURM_JOB_ID", "5"}});
  EXPECT_EQ(batch.num_machines, 1);
  EXPECT_EQ(batch.main_process_port, 20005);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("srun --ntasks-per-node=1 accelerate launch"), std::string::npos);
}

}  // namespace
}  // namespace accelerate::launcher
