// `accelerate env`: the sections of the bug-report text, and the config file
// it reports (an explicit --config_file, the one under $HF_HOME, or none).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "accelerate/common/version.h"
#include "cli/cli_test_support.h"
#include "cli/env_command.h"

namespace accelerate::cli {
namespace {

using testing::run_accelerate;
using testing::TemporaryFolder;
using testing::write_file;

bool has_line(const std::string& out, const std::string& line) {
  for (const auto& candidate : testing::split_lines(out)) {
    if (candidate == line) return true;
  }
  return false;
}

bool has_line_starting(const std::string& out, const std::string& prefix) {
  for (const auto& candidate : testing::split_lines(out)) {
    if (candidate.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

const char* const kConfig =
    "compute_environment: LOCAL_MACHINE\n"
    "distributed_type: MULTI_CPU\n"
    "mixed_precision: 'no'\n"
    "num_machines: 1\n"
    "num_processes: 2\n"
    "use_cpu: true\n";

TEST(EnvCommand, PrintsEverySectionWithOurVersion) {
  TemporaryFolder home;
  auto result = run_accelerate({"env"}, {{"HF_HOME", home.path()}});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("Copy-and-paste the text below in your GitHub issue"),
            std::string::npos);
  EXPECT_TRUE(
      has_line(result.out, "- accelerate-cpp version: " + std::string(accelerate::kVersion)))
      << result.out;
  EXPECT_TRUE(has_line(result.out, "- LibTorch version (built against): " EXPECTED_TORCH_VERSION))
      << result.out;
  for (const char* section :
       {"- Compiler: ", "- LibTorch features: CUDA ", "- Platform: ", "- CPU: ", "- CPU features: ",
        "- bf16: ", "- RAM: ", "- GPUs: ", "- Environment variables:", "- Config file: "}) {
    EXPECT_TRUE(has_line_starting(result.out, section)) << section << "\n" << result.out;
  }
  EXPECT_EQ(result.err, "");
}

TEST(EnvCommand, TheOpenblasLineSaysWhatTheLauncherSets) {
  const std::vector<std::string> cpu = {"avx2", "fma"};
  EXPECT_EQ(openblas_line(std::string("Prescott"), cpu),
            "- OpenBLAS kernels: Prescott (generic: OpenBLAS does not know this CPU; `accelerate "
            "launch` gives its processes OPENBLAS_CORETYPE=Haswell)\n");
  EXPECT_EQ(openblas_line(std::string("Zen"), cpu), "- OpenBLAS kernels: Zen\n");
  EXPECT_EQ(openblas_line(std::nullopt, cpu), "- OpenBLAS kernels: no libopenblas.so.0 found\n");
}

// The kernels' instruction set: the highest, a cap, a refused cap.
TEST(EnvCommand, TheKernelsLineSaysTheInstructionSetAndItsCap) {
  const std::vector<std::string> avx2 = {"sse2", "avx", "avx2", "bmi1",  "bmi2",
                                         "f16c", "fma", "abm",  "movbe", "xsave"};
  EXPECT_EQ(kernels_line({}, avx2), "- CPU kernels: avx2\n");
  EXPECT_EQ(kernels_line({{"ACCELERATE_CPU_CAPABILITY", "default"}}, avx2),
            "- CPU kernels: default (ACCELERATE_CPU_CAPABILITY; the highest here is avx2)\n");
  EXPECT_EQ(kernels_line({{"ACCELERATE_CPU_CAPABILITY", "avx512"}}, avx2),
            "- CPU kernels: ACCELERATE_CPU_CAPABILITY=avx512 asks for instructions this CPU "
            "lacks: its flags have no avx512f (the highest here is avx2); programs stop with "
            "this error\n");
  EXPECT_EQ(kernels_line({}, {"fp", "asimd"}), "- CPU kernels: default\n");
}

// EPYC (Zen 2/3: AVX2, no bf16), a Sapphire Rapids (AMX), a Graviton 3.
TEST(EnvCommand, TheBf16LineNamesTheInstructionsOrTheirAbsence) {
  EXPECT_EQ(bf16_line({"sse2", "avx2", "fma"})
                .rfind("- bf16: this CPU has no bf16 instructions "
                       "(no avx512_bf16 or amx_bf16): ",
                       0),
            0u)
      << bf16_line({"sse2", "avx2", "fma"});
  EXPECT_EQ(bf16_line({"sse2", "avx512f", "avx512_bf16", "amx_bf16"}),
            "- bf16: in hardware (avx512_bf16 amx_bf16)\n");
  EXPECT_EQ(bf16_line({"fp", "asimd", "bf16"}), "- bf16: in hardware (bf16)\n");
  EXPECT_EQ(bf16_line({}), "- bf16: unknown (no CPU flags this command knows)\n");
}

TEST(EnvCommand, ListsTheShardingVariables) {
  TemporaryFolder home;
  auto result = run_accelerate({"env"}, {{"HF_HOME", home.path()},
                                         {"ACCELERATE_USE_FSDP", "true"},
                                         {"FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP"}});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(has_line(result.out, "\t- ACCELERATE_USE_FSDP=true")) << result.out;
  EXPECT_TRUE(has_line(result.out, "\t- FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP")) << result.out;
}

// Every declared setting is listed when set (the thread and OpenBLAS ones
// too, which have no ACCELERATE_ prefix), and other variables are not.
TEST(EnvCommand, ListsEveryDeclaredSettingThatIsSet) {
  TemporaryFolder home;
  auto result = run_accelerate({"env"}, {{"HF_HOME", home.path()},
                                         {"OPENBLAS_THREAD_TIMEOUT", "6"},
                                         {"OMP_WAIT_POLICY", "ACTIVE"},
                                         {"PARALLELISM_CONFIG_SP_SIZE", "2"},
                                         {"SOME_UNRELATED_VARIABLE", "x"}});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const char* line : {"\t- OPENBLAS_THREAD_TIMEOUT=6", "\t- OMP_WAIT_POLICY=ACTIVE",
                           "\t- PARALLELISM_CONFIG_SP_SIZE=2"}) {
    EXPECT_TRUE(has_line(result.out, line)) << line << "\n" << result.out;
  }
  EXPECT_EQ(result.out.find("SOME_UNRELATED_VARIABLE"), std::string::npos) << result.out;
}

TEST(EnvCommand, ReportsTheExplicitConfigFile) {
  TemporaryFolder folder;
  const std::string config = folder.path() + "/my_config.yaml";
  write_file(config, kConfig);
  auto result = run_accelerate({"env", "--config_file", config}, {{"HF_HOME", folder.path()}});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(has_line(result.out, "- Config file: " + config)) << result.out;
  EXPECT_TRUE(has_line(result.out, "\t- num_processes: 2")) << result.out;
  EXPECT_TRUE(has_line(result.out, "\t- distributed_type: MULTI_CPU")) << result.out;
}

TEST(EnvCommand, FindsTheDefaultConfigUnderHfHome) {
  TemporaryFolder home;
  ::mkdir((home.path() + "/accelerate").c_str(), 0755);
  const std::string config = home.path() + "/accelerate/default_config.yaml";
  write_file(config, kConfig);
  auto result = run_accelerate({"env"}, {{"HF_HOME", home.path()}});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(has_line(result.out, "- Config file: " + config)) << result.out;
  EXPECT_TRUE(has_line(result.out, "\t- use_cpu: true")) << result.out;
  // HF_HOME itself is one of the variables a report shows.
  EXPECT_TRUE(has_line(result.out, "\t- HF_HOME=" + home.path())) << result.out;
}

TEST(EnvCommand, SaysWhenThereIsNoConfigFile) {
  TemporaryFolder home;
  auto result = run_accelerate({"env"}, {{"HF_HOME", home.path()}});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(has_line(result.out, "- Config file: not found (looked for " + home.path() +
                                       "/accelerate/default_config.yaml)"))
      << result.out;
}

TEST(EnvCommand, ABrokenConfigIsReportedNotFatal) {
  TemporaryFolder folder;
  const std::string config = folder.path() + "/broken.yaml";
  write_file(config, "num_processes: 2\nnot_a_key_anyone_knows: 1\n");
  auto result = run_accelerate({"env", "--config_file", config});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(has_line_starting(result.out, "\t- cannot be used: ")) << result.out;
  EXPECT_NE(result.out.find("not_a_key_anyone_knows"), std::string::npos) << result.out;
}

TEST(EnvCommand, BadArgumentsAreOneLineErrors) {
  TemporaryFolder folder;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"env", "--config_file", folder.path() + "/missing.yaml"},
           {"env", "--config_file"},
           {"env", "extra"}}) {
    auto result = run_accelerate(args);
    EXPECT_EQ(result.exit_code, 2) << args.back();
    const auto lines = testing::split_lines(result.err);
    ASSERT_EQ(lines.size(), 1u) << result.err;
    EXPECT_EQ(lines[0].rfind("accelerate env: error: ", 0), 0u) << lines[0];
  }
}

TEST(CliCommands, TopLevelHelpListsEnvTestAndEstimateMemory) {
  auto result = run_accelerate({"--help"});
  ASSERT_EQ(result.exit_code, 0);
  for (const char* command : {"  env ", "  test ", "  estimate-memory "}) {
    EXPECT_TRUE(has_line_starting(result.out, command)) << command << "\n" << result.out;
  }
  for (const char* command : {"env", "test", "estimate-memory"}) {
    auto help = run_accelerate({command, "--help"});
    EXPECT_EQ(help.exit_code, 0) << command;
    EXPECT_EQ(help.out.rfind(std::string("usage: accelerate ") + command, 0), 0u) << help.out;
  }
}

}  // namespace
}  // namespace accelerate::cli
