// Parsing and resolving `accelerate launch` flags: pure functions, no processes.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sstream>

#include <algorithm>
#include <fstream>

#include "launcher/launch_errors.h"
#include "launcher/launch_options.h"
#include "launcher/launch_test_support.h"
#include "launcher/port_check.h"
#include "support/process_runner.h"

namespace accelerate::launcher {
namespace {

TEST(LaunchOptions, BothSpellingsAndBothValueForms) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--num_processes", "3", "prog"},
                                                                {"--num-processes", "3", "prog"},
                                                                {"--num_processes=3", "prog"},
                                                                {"--num-processes=3", "prog"}}) {
    LaunchOptions options = parse(args);
    EXPECT_EQ(options.num_processes, 3) << args[0];
    EXPECT_EQ(options.source_of("num_processes"), OptionSource::kFlag);
    EXPECT_EQ(options.program, "prog");
  }
  LaunchOptions options = parse({"--main-process-port=1234", "--mixed_precision", "bf16",
                                 "--gradient-accumulation-steps=4", "--num_cpu_threads_per_process",
                                 "2", "--cpu", "--debug", "-q", "prog"});
  EXPECT_EQ(options.main_process_port, 1234);
  EXPECT_EQ(options.mixed_precision, accelerate::MixedPrecision::kBF16);
  EXPECT_EQ(options.gradient_accumulation_steps, 4);
  EXPECT_EQ(options.num_cpu_threads_per_process, 2);
  EXPECT_TRUE(options.cpu);
  EXPECT_TRUE(options.debug);
  EXPECT_TRUE(options.quiet);
}

TEST(LaunchOptions, DefaultsAreRecordedAsDefaults) {
  LaunchOptions options = parse({"--cpu", "prog"});
  EXPECT_EQ(options.source_of("cpu"), OptionSource::kFlag);
  EXPECT_EQ(options.source_of("num_machines"), OptionSource::kDefault);
  EXPECT_EQ(options.source_of("main_process_port"), OptionSource::kDefault);
  EXPECT_EQ(options.num_machines, 1);
  EXPECT_EQ(options.machine_rank, 0);
  EXPECT_EQ(options.main_process_ip, "127.0.0.1");
  EXPECT_EQ(options.main_process_port, 29500);
  EXPECT_FALSE(options.mixed_precision.has_value());
  auto lines = describe_effective_settings(options);
  EXPECT_NE(std::find(lines.begin(), lines.end(), "cpu = true (flag)"), lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(), "main_process_port = 29500 (default)"),
            lines.end());
}

TEST(LaunchOptions, FlagsStopAtProgramAndTheRestIsUntouched) {
  LaunchOptions options = parse({"-m", "pkg.train", "--num_processes", "8", "--", "-x"});
  EXPECT_TRUE(options.module);
  EXPECT_EQ(options.num_processes, 0);  // the 8 belongs to the program
  EXPECT_EQ(options.program, "pkg.train");
  EXPECT_EQ(options.program_args, (std::vector<std::string>{"--num_processes", "8", "--", "-x"}));

  LaunchOptions after_separator = parse({"--cpu", "--", "-weird-name", "a"});
  EXPECT_EQ(after_separator.program, "-weird-name");
  EXPECT_EQ(after_separator.program_args, std::vector<std::string>{"a"});
}

TEST(LaunchOptions, HelpIsRecognised) {
  EXPECT_TRUE(parse_launch_arguments({"--help"}).show_help);
  EXPECT_TRUE(parse_launch_arguments({"--cpu", "-h"}).show_help);
  std::string help = launch_help_text();
  for (const auto& spec : launch_flag_table()) {
    EXPECT_NE(help.find("--" + std::string(spec.name)), std::string::npos) << spec.name;
  }
}

// Hugging Face's groups, every flag in one, and one straight help column.
TEST(LaunchOptions, HelpListsEveryFlagOnceInItsGroupInOneColumn) {
  for (const auto& spec : launch_flag_table())
    EXPECT_NE(launch_help_group(spec.name), "") << spec.name << " is in no --help group";
  EXPECT_EQ(launch_help_group("zero_stage"), "DeepSpeed (with --use_deepspeed)");
  EXPECT_EQ(launch_help_group("fsdp_version"), "FSDP (with --use_fsdp)");
  EXPECT_EQ(launch_help_group("cpu"), "Hardware selection");
  const std::string help = launch_help_text();
  std::string group;
  std::size_t rows = 0;
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line.back() == ':' && line[0] != ' ')
      group = line.substr(0, line.size() - 1);
    if (line.rfind("  --", 0) != 0 && line.rfind("  -", 0) != 0) continue;
    const std::string flag = line.substr(
        line.find("--") + 2, line.find_first_of(" \n", line.find("--")) - line.find("--") - 2);
    if (flag == "help") continue;
    ++rows;
    EXPECT_EQ(group, launch_help_group(flag)) << line;
    // A row's help starts at column 35, or on the next line when the flag
    // is too long for that.
    const std::size_t left_end = line.find("  ", 2);
    if (left_end != std::string::npos)
      EXPECT_EQ(line.find_first_not_of(' ', left_end), 35u) << line;
  }
  EXPECT_EQ(rows, launch_flag_table().size());
  for (std::size_t at = help.find("\n                                   "); at != std::string::npos;
       at = help.find("\n                                   ", at + 1)) {
    EXPECT_NE(help[at + 36], ' ') << "a continuation line off the column at " << at;
  }
}

TEST(LaunchOptions, BadValuesNameTheFlagAndTheExpectation) {
  EXPECT_EQ(usage_error_of({"--num_processes", "0", "p"}),
            "--num_processes expects a whole number from 1 to 1000000, got '0'");
  EXPECT_EQ(usage_error_of({"--num-processes=two", "p"}),
            "--num-processes expects a whole number from 1 to 1000000, got 'two'");
  EXPECT_EQ(usage_error_of({"--num_processes", "2x", "p"}),
            "--num_processes expects a whole number from 1 to 1000000, got '2x'");
  EXPECT_EQ(
      usage_error_of({"--main_process_port", "70000", "p"}),
      "--main_process_port expects a port number 1..65535 (or 0 for any free port), got '70000'");
  EXPECT_EQ(usage_error_of({"--mixed_precision", "fp8", "p"}),
            "--mixed_precision expects one of no, bf16, fp16, got 'fp8'");
  EXPECT_EQ(usage_error_of({"--gradient_accumulation_steps", "-1", "p"}),
            "--gradient_accumulation_steps expects a whole number from 1 to 1000000, got '-1'");
  EXPECT_EQ(usage_error_of({"--num_cpu_threads_per_process", "", "p"}),
            "--num_cpu_threads_per_process expects a whole number from 1 to 1000000, got ''");
  EXPECT_EQ(usage_error_of({"--cpu=yes", "p"}), "--cpu takes no value, got 'yes'");
  EXPECT_EQ(usage_error_of({"--num_processes"}), "--num_processes needs a value (N)");
  EXPECT_EQ(usage_error_of({"--cpu"}),
            "no program given; usage: accelerate launch [flags] PROGRAM [ARGS...]");
}

TEST(LaunchOptions, UnknownFlagSuggestsTheClosestOne) {
  std::string message = usage_error_of({"--num_process", "2", "p"});
  EXPECT_EQ(message.rfind("unknown flag '--num_process'; did you mean --num_processes?", 0), 0u)
      << message;
  message = usage_error_of({"--frobnicate", "p"});
  EXPECT_EQ(message.rfind("unknown flag '--frobnicate'; see 'accelerate launch --help'", 0), 0u)
      << message;
  EXPECT_EQ(usage_error_of({"-z", "p"}).rfind("unknown flag '-z'", 0), 0u);
}

TEST(LaunchOptions, MachineRankMustBeBelowMachineCount) {
  EXPECT_EQ(usage_error_of({"--num_machines", "2", "--machine_rank", "2", "--main_process_ip",
                            "10.0.0.1", "p"}),
            "--machine_rank 2 is out of range for --num_machines 2 (machine ranks are 0..1)");
  EXPECT_EQ(usage_error_of({"--machine_rank", "1", "p"}),
            "--machine_rank 1 is out of range for --num_machines 1 (machine ranks are 0..0)");
  EXPECT_EQ(usage_error_of({"--num_machines", "2", "--machine_rank", "1", "--main_process_ip",
                            "10.0.0.1", "p"}),
            "(no error)");
}

TEST(LaunchOptions, SeveralMachinesNeedAnAddressAndAFixedPort) {
  EXPECT_EQ(usage_error_of({"--num_machines", "2", "p"}),
            "--main_process_ip is required when --num_machines is 2: give the address of machine "
            "rank 0, reachable from every machine");
  EXPECT_EQ(usage_error_of({"--num_machines", "2", "--main_process_ip", "10.0.0.1",
                            "--main_process_port", "0", "p"}),
            "--main_process_port 0 (pick a free port) works only with one machine; with "
            "--num_machines 2 give every machine the same fixed port");
  EXPECT_EQ(usage_error_of({"--main_process_port", "0", "p"}), "(no error)");
}

TEST(LaunchOptions, ModuleAndNoPythonConflict) {
  EXPECT_EQ(usage_error_of({"-m", "--no_python", "p"}),
            "--module and --no_python conflict: a module always runs with python3");
}

TEST(LaunchOptions, ProcessCountDefaultsToVisibleGpusUnlessCpu) {
  MachineFacts four_gpus;
  four_gpus.visible_gpus = 4;
  LaunchOptions gpu = parse({"p"});
  resolve_launch_options(gpu, four_gpus);
  EXPECT_EQ(gpu.num_processes, 4);
  EXPECT_EQ(gpu.source_of("num_processes"), OptionSource::kDefault);

  LaunchOptions cpu = parse({"--cpu", "p"});
  resolve_launch_options(cpu, four_gpus);
  EXPECT_EQ(cpu.num_processes, 1);

  LaunchOptions no_gpus = parse({"p"});
  resolve_launch_options(no_gpus, MachineFacts{});
  EXPECT_EQ(no_gpus.num_processes, 1);

  // --cpu with an explicit count really gets that count (HF issue #2741).
  LaunchOptions explicit_count = parse({"--cpu", "--num_processes", "2", "p"});
  resolve_launch_options(explicit_count, four_gpus);
  EXPECT_EQ(explicit_count.num_processes, 2);
}

TEST(LaunchMachineFacts, VisibleGpusFollowCudaVisibleDevices) {
  EXPECT_EQ(count_visible_gpus(4, std::nullopt), 4);
  EXPECT_EQ(count_visible_gpus(4, std::string("1,3")), 2);
  EXPECT_EQ(count_visible_gpus(4, std::string("")), 0);
  EXPECT_EQ(count_visible_gpus(4, std::string("0,-1,2")), 1);  // CUDA stops at the first invalid
  EXPECT_EQ(count_visible_gpus(4, std::string("0,7")), 1);
  EXPECT_EQ(count_visible_gpus(2, std::string("GPU-aa,GPU-bb,GPU-cc")), 2);
  EXPECT_EQ(count_visible_gpus(0, std::string("0")), 0);
  EXPECT_EQ(count_nvidia_gpus("/nonexistent/driver/folder"), 0);
  EXPECT_GE(count_usable_cpu_cores(), 1);
}

// A fake /sys/class/kfd/kfd/topology/nodes of a LUMI-G node: node 0 is the
// CPU (no SIMDs), nodes 1-8 the eight MI250X GCDs (gfx90a).
std::string make_mi250x_kfd_nodes(const std::string& root) {
  const std::string nodes = root + "/nodes";
  ::mkdir(nodes.c_str(), 0755);
  for (int node = 0; node <= 8; ++node) {
    const std::string folder = nodes + "/" + std::to_string(node);
    ::mkdir(folder.c_str(), 0755);
    const bool gpu = node > 0;
    std::ofstream(folder + "/properties")
        << "cpu_cores_count " << (gpu ? 0 : 64) << "\nsimd_count " << (gpu ? 440 : 0)
        << "\nmem_banks_count 1\ngfx_target_version " << (gpu ? 90010 : 0) << "\n";
    std::ofstream(folder + "/gpu_id") << (gpu ? 4000 + node : 0) << "\n";
  }
  return nodes;
}

TEST(LaunchMachineFacts, AmdGpusAreTheKfdNodesWithSimds) {
  accelerate::testing::TemporaryFolder sysfs;
  const std::string nodes = make_mi250x_kfd_nodes(sysfs.path());
  const auto gpus = read_amd_gpu_nodes(nodes);
  ASSERT_EQ(gpus.size(), 8u);
  EXPECT_EQ(gpus.front().node, 1);
  EXPECT_EQ(gpus.front().gfx_target, "gfx90a");
  EXPECT_EQ(gpus.back().node, 8);
  EXPECT_EQ(count_amd_gpus(nodes), 8);
  EXPECT_EQ(count_amd_gpus(sysfs.path() + "/no-amdgpu-driver"), 0);
}

TEST(LaunchMachineFacts, VisibleAmdGpusFollowRocrThenHipVariables) {
  auto visible = [](const Environment& env) { return count_visible_amd_gpus(8, env); };
  EXPECT_EQ(visible({}), 8);
  // ROCR_VISIBLE_DEVICES first, then HIP numbers what is left.
  EXPECT_EQ(visible({{"ROCR_VISIBLE_DEVICES", "0,1,2,3"}, {"HIP_VISIBLE_DEVICES", "1,3"}}), 2);
  EXPECT_EQ(visible({{"ROCR_VISIBLE_DEVICES", "0,1,2,3"}, {"HIP_VISIBLE_DEVICES", "5"}}), 0);
  EXPECT_EQ(visible({{"ROCR_VISIBLE_DEVICES", "0,1,2,3"}, {"CUDA_VISIBLE_DEVICES", "1,3"}}), 2);
  EXPECT_EQ(visible({{"ROCR_VISIBLE_DEVICES", "GPU-4a3f1c2d5e6b7a80,GPU-4a3f1c2d5e6b7a81"}}), 2);
  // The first invalid entry ends each list.
  EXPECT_EQ(visible({{"ROCR_VISIBLE_DEVICES", "0,1,9,2"}}), 2);
  EXPECT_EQ(visible({{"HIP_VISIBLE_DEVICES", "0,x,2"}}), 1);
  // HIP_VISIBLE_DEVICES wins over CUDA_VISIBLE_DEVICES.
  EXPECT_EQ(visible({{"HIP_VISIBLE_DEVICES", "0,1,2"}, {"CUDA_VISIBLE_DEVICES", "0"}}), 3);
  // ROCR_VISIBLE_DEVICES set but empty hides every GPU; HIP reads its empty
  // lists as unset instead.
  EXPECT_EQ(visible({{"ROCR_VISIBLE_DEVICES", ""}}), 0);
  EXPECT_EQ(visible({{"HIP_VISIBLE_DEVICES", ""}}), 8);
  EXPECT_EQ(visible({{"CUDA_VISIBLE_DEVICES", ""}}), 8);
  EXPECT_EQ(visible({{"HIP_VISIBLE_DEVICES", ""}, {"CUDA_VISIBLE_DEVICES", "1"}}), 1);
  EXPECT_EQ(count_visible_amd_gpus(0, {{"HIP_VISIBLE_DEVICES", "0"}}), 0);
}

TEST(LaunchMachineFacts, DefaultProcessCountCountsNvidiaAndAmdGpus) {
  accelerate::testing::TemporaryFolder machine;
  GpuDriverFolders amd_node;
  amd_node.nvidia_gpus = machine.path() + "/no-nvidia-driver";
  amd_node.amd_kfd_nodes = make_mi250x_kfd_nodes(machine.path());
  EXPECT_EQ(count_visible_gpus_of_all_vendors({}, amd_node), 8);
  EXPECT_EQ(count_visible_gpus_of_all_vendors(
                {{"ROCR_VISIBLE_DEVICES", "0,1,2,3"}, {"HIP_VISIBLE_DEVICES", "1,3"}}, amd_node),
            2);

  // An NVIDIA machine keeps CUDA's rules, and ROCm's variables change nothing.
  GpuDriverFolders nvidia_node;
  nvidia_node.nvidia_gpus = machine.path() + "/nvidia-gpus";
  nvidia_node.amd_kfd_nodes = machine.path() + "/no-amdgpu-driver";
  ::mkdir(nvidia_node.nvidia_gpus.c_str(), 0755);
  for (const char* bus : {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"}) {
    ::mkdir((nvidia_node.nvidia_gpus + "/" + bus).c_str(), 0755);
  }
  EXPECT_EQ(count_visible_gpus_of_all_vendors({}, nvidia_node), 4);
  EXPECT_EQ(count_visible_gpus_of_all_vendors({{"CUDA_VISIBLE_DEVICES", "1,3"}}, nvidia_node), 2);
  EXPECT_EQ(count_visible_gpus_of_all_vendors({{"CUDA_VISIBLE_DEVICES", ""}}, nvidia_node), 0);
  EXPECT_EQ(count_visible_gpus_of_all_vendors(
                {{"HIP_VISIBLE_DEVICES", "0"}, {"ROCR_VISIBLE_DEVICES", ""}}, nvidia_node),
            4);
}

// --main_process_port 0 picks below the kernel's ephemeral range, so the
// port cannot also be handed to another process's bind(0) listener before
// rank 0's store binds it (a cause of "connection closed by peer" flakes).
TEST(PortCheck, PickedPortIsFreeAndBelowTheEphemeralRange) {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768, high = 60999;
  range >> low >> high;
  for (int i = 0; i < 20; ++i) {
    const int port = pick_free_port();
    EXPECT_LT(port, low);
    EXPECT_GT(port, 1024);
    EXPECT_TRUE(port_is_free(port)) << port;
  }
}

}  // namespace
}  // namespace accelerate::launcher
