// Loading config files written by Hugging Face Accelerate (several versions,
// kept as fixtures; src/config/config_file.h) and applying them to launch
// options (src/launcher/config_application.h): values, sources,
// precedence, notes for ignored keys, and one-line errors for bad files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include "config/config_file.h"
#include "launcher/config_application.h"
#include "launcher/launch_errors.h"
#include "support/process_runner.h"

namespace accelerate::config {
namespace {

using launcher::apply_config_file;
using launcher::LaunchOptions;
using launcher::OptionSource;

const std::string kFixtures = CONFIG_FIXTURES_DIR;

struct Applied {
  LaunchOptions options;
  std::vector<std::string> notes;
};

Applied apply_fixture(const std::string& name, LaunchOptions options = {}) {
  Applied result{std::move(options), {}};
  result.notes = apply_config_file(load_config_file(kFixtures + "/" + name), result.options);
  return result;
}

// The message of the ConfigFileError that loading `text` throws.
std::string load_error(const std::string& text) {
  try {
    parse_config_text(text, "my.yaml");
  } catch (const ConfigFileError& error) {
    return error.what();
  }
  return "(no error)";
}

bool mentions(const std::vector<std::string>& notes, const std::string& text) {
  return std::any_of(notes.begin(), notes.end(),
                     [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

TEST(ConfigFixtures, SeedExampleGivesTwoGpuProcessesFromTheFile) {
  Applied a = apply_fixture("seed_example.yaml");
  EXPECT_EQ(a.options.num_processes, 2);
  EXPECT_TRUE(a.options.multi_gpu);
  EXPECT_FALSE(a.options.cpu);
  EXPECT_EQ(a.options.mixed_precision, accelerate::MixedPrecision::kNo);
  EXPECT_EQ(a.options.gpu_ids, "all");
  EXPECT_EQ(a.options.source_of("num_processes"), OptionSource::kConfigFile);
  EXPECT_EQ(a.options.source_of("multi_gpu"), OptionSource::kConfigFile);
  EXPECT_EQ(a.options.source_of("mixed_precision"), OptionSource::kConfigFile);
  EXPECT_EQ(a.options.source_of("debug"), OptionSource::kConfigFile);
  // Every ignored key holds its "off" value: nothing to report.
  EXPECT_TRUE(a.notes.empty()) << a.notes.front();
}

TEST(ConfigFixtures, Accelerate05FileWithFp16KeyMeansMixedPrecisionFp16) {
  Applied a = apply_fixture("hf_0_5_fp16.yaml");
  EXPECT_EQ(a.options.mixed_precision, accelerate::MixedPrecision::kFP16);
  EXPECT_EQ(a.options.num_processes, 2);
  EXPECT_TRUE(a.options.multi_gpu);
  EXPECT_EQ(a.options.main_process_ip, "127.0.0.1");  // null: the default stays
  EXPECT_EQ(a.options.source_of("main_process_ip"), OptionSource::kDefault);
  EXPECT_EQ(a.options.source_of("main_process_port"), OptionSource::kDefault);
  EXPECT_TRUE(a.notes.empty());
}

TEST(ConfigFixtures, Accelerate012FileLoads) {
  Applied a = apply_fixture("hf_0_12.yaml");
  EXPECT_EQ(a.options.num_processes, 4);
  EXPECT_EQ(a.options.mixed_precision, accelerate::MixedPrecision::kFP16);
  EXPECT_FALSE(a.options.cpu);
  EXPECT_EQ(a.options.source_of("cpu"), OptionSource::kConfigFile);
  EXPECT_TRUE(a.notes.empty());
}

TEST(ConfigFixtures, Accelerate017FileWithQuotedNoLoads) {
  Applied a = apply_fixture("hf_0_17.yaml");
  EXPECT_EQ(a.options.num_processes, 1);
  EXPECT_FALSE(a.options.multi_gpu);
  EXPECT_EQ(a.options.source_of("multi_gpu"), OptionSource::kDefault);
  EXPECT_EQ(a.options.mixed_precision, accelerate::MixedPrecision::kBF16);
  EXPECT_EQ(a.options.rdzv_backend, "static");
  EXPECT_TRUE(a.options.same_network);
  EXPECT_TRUE(a.notes.empty()) << a.notes.front();
}

TEST(ConfigFixtures, MultiNodeFileSetsRendezvousAndRank) {
  Applied a = apply_fixture("current_multi_node.yaml");
  EXPECT_EQ(a.options.num_machines, 2);
  EXPECT_EQ(a.options.machine_rank, 1);
  EXPECT_EQ(a.options.main_process_ip, "10.1.2.3");
  EXPECT_EQ(a.options.main_process_port, 29555);
  EXPECT_EQ(a.options.num_processes, 4);
  EXPECT_EQ(a.options.gpu_ids, "0,1");
  EXPECT_TRUE(a.options.debug);
  EXPECT_EQ(a.options.source_of("machine_rank"), OptionSource::kConfigFile);
  EXPECT_EQ(a.options.source_of("main_process_port"), OptionSource::kConfigFile);
}

TEST(ConfigFixtures, UnsupportedSectionsAreIgnoredWithANoteEach) {
  Applied a = apply_fixture("unsupported_sections.yaml");
  EXPECT_EQ(a.options.num_processes, 2);
  EXPECT_EQ(a.options.mixed_precision, accelerate::MixedPrecision::kBF16);
  const std::string file = kFixtures + "/unsupported_sections.yaml";
  // The sharding sections apply only with distributed_type DEEPSPEED / FSDP.
  EXPECT_TRUE(mentions(
      a.notes,
      file + ":5: deepspeed_config is ignored: distributed_type is MULTI_GPU, not DEEPSPEED"));
  EXPECT_TRUE(mentions(a.notes, file + ":13: dynamo_config is ignored"));
  EXPECT_TRUE(mentions(a.notes, file + ":16: enable_cpu_affinity is ignored"));
  EXPECT_TRUE(mentions(
      a.notes, file + ":17: fsdp_config is ignored: distributed_type is MULTI_GPU, not FSDP"));
  EXPECT_FALSE(a.options.use_deepspeed);
  EXPECT_FALSE(a.options.zero_stage.has_value());
  // megatron_lm_config: {} and tpu_env: [] ask for nothing.
  EXPECT_EQ(a.notes.size(), 4u);
}

TEST(ConfigFixtures, MpirunConfigGivesTheHostfileAndCpu) {
  Applied a = apply_fixture("mpirun_multi_cpu.yaml");
  EXPECT_TRUE(a.options.cpu);
  EXPECT_FALSE(a.options.multi_gpu);
  EXPECT_EQ(a.options.num_processes, 4);
  EXPECT_EQ(a.options.mpirun_hostfile, "/home/user/hostfile");
  EXPECT_EQ(a.options.source_of("mpirun_hostfile"), OptionSource::kConfigFile);
  EXPECT_TRUE(a.notes.empty()) << a.notes.front();  // ipex off, one oneCCL thread
}

TEST(ConfigFixtures, JsonFileFromConfigDefaultLoads) {
  Applied a = apply_fixture("hf_default_json.yaml");
  EXPECT_TRUE(a.options.cpu);
  EXPECT_EQ(a.options.num_processes, 1);
  EXPECT_FALSE(a.options.same_network);
  EXPECT_TRUE(a.notes.empty()) << a.notes.front();  // downcast_bf16: false is "off"
}

TEST(ConfigFixtures, OldDynamoBackendKeyIsReportedWhenOn) {
  Applied a = apply_fixture("hf_0_17_dynamo_on.yaml");
  EXPECT_TRUE(a.options.cpu);
  ASSERT_EQ(a.notes.size(), 1u);
  EXPECT_NE(a.notes[0].find(":3: dynamo_backend is ignored: torch dynamo"), std::string::npos)
      << a.notes[0];
}

TEST(ConfigPrecedence, FlagsWinOverTheFile) {
  LaunchOptions options;
  options.num_processes = 3;
  options.sources["num_processes"] = OptionSource::kFlag;
  options.mixed_precision = accelerate::MixedPrecision::kFP16;
  options.sources["mixed_precision"] = OptionSource::kFlag;
  options.num_machines = 2;
  options.sources["num_machines"] = OptionSource::kSlurm;  // the allocation beats the file too
  Applied a = apply_fixture("seed_example.yaml", options);
  EXPECT_EQ(a.options.num_processes, 3);
  EXPECT_EQ(a.options.mixed_precision, accelerate::MixedPrecision::kFP16);
  EXPECT_EQ(a.options.num_machines, 2);
  EXPECT_EQ(a.options.source_of("num_processes"), OptionSource::kFlag);
  EXPECT_EQ(a.options.source_of("num_machines"), OptionSource::kSlurm);
  EXPECT_EQ(a.options.source_of("rdzv_backend"), OptionSource::kConfigFile);
}

TEST(ConfigPrecedence, CpuFlagReplacesTheFilesMultiGpu) {
  LaunchOptions options;
  options.cpu = true;
  options.sources["cpu"] = OptionSource::kFlag;
  Applied a = apply_fixture("seed_example.yaml", options);
  EXPECT_TRUE(a.options.cpu);
  EXPECT_FALSE(a.options.multi_gpu);
  EXPECT_EQ(a.options.source_of("multi_gpu"), OptionSource::kDefault);
}

TEST(ConfigApply, NumProcessesMinusOneMeansUnset) {
  ConfigFile file = parse_config_text(
      "distributed_type: MULTI_CPU\nnum_processes: -1\nuse_cpu: true\n", "f.yaml");
  LaunchOptions options;
  apply_config_file(file, options);
  EXPECT_EQ(options.source_of("num_processes"), OptionSource::kDefault);
  EXPECT_TRUE(options.cpu);
}

TEST(ConfigApply, BadValueFailsThroughTheFlagRowNamingFileLineAndKey) {
  ConfigFile file = parse_config_text("distributed_type: MULTI_CPU\nnum_processes: 0\n", "f.yaml");
  LaunchOptions options;
  try {
    apply_config_file(file, options);
    FAIL() << "expected an error";
  } catch (const launcher::UsageError& error) {
    EXPECT_STREQ(error.what(),
                 "f.yaml:2: key 'num_processes' expects a whole number from 1 to 1000000, got '0'");
  }
}

TEST(ConfigErrors, UnknownKeyNamesFileLineKeyAndSuggestion) {
  EXPECT_EQ(load_error("distributed_type: NO\nnum_proceses: 2\nfoo: 1\n"),
            "my.yaml:2: unknown key 'num_proceses' (did you mean 'num_processes'?); also unknown: "
            "'foo' (line 3); "
            "see 'Config file' in docs/cli.md for the keys");
}

TEST(ConfigErrors, WrongTypesNameKeyAndLine) {
  EXPECT_EQ(load_error("num_processes: two\n"),
            "my.yaml:1: key 'num_processes' expects a whole number, got 'two'");
  EXPECT_EQ(load_error("debug: false\nuse_cpu: maybe\n"),
            "my.yaml:2: key 'use_cpu' expects true or false, got 'maybe'");
  EXPECT_EQ(load_error("deepspeed_config: 3\n"),
            "my.yaml:1: key 'deepspeed_config' expects a mapping of keys (a section), got '3'");
  EXPECT_EQ(load_error("tpu_env: {a: 1}\n"),
            "my.yaml:1: key 'tpu_env' expects a list, got a mapping");
  EXPECT_EQ(load_error("main_process_ip: [1, 2]\n"),
            "my.yaml:1: key 'main_process_ip' expects a single value, got a list");
  EXPECT_EQ(load_error("machine_rank: null\n"),
            "my.yaml:1: key 'machine_rank' expects a whole number, got null");
}

TEST(ConfigErrors, DistributedTypesWeCannotRunAreClearErrors) {
  EXPECT_EQ(load_error("distributed_type: XLA\n"),
            "my.yaml:1: key 'distributed_type' is XLA, which accelerate-cpp cannot run (it runs "
            "NO, MULTI_CPU, "
            "MULTI_GPU, DEEPSPEED and FSDP)");
  EXPECT_EQ(load_error("distributed_type: DEEPSPEED\n"),
            "(no error)");  // ZeRO (config_sharding_test.cpp)
  EXPECT_EQ(load_error("distributed_type: FSDP\n"), "(no error)");
  for (const char* type : {"TPU", "MULTI_NPU", "MEGATRON_LM"}) {
    EXPECT_NE(load_error(std::string("distributed_type: ") + type + "\n")
                  .find("which accelerate-cpp cannot run"),
              std::string::npos)
        << type;
  }
  EXPECT_NE(load_error("distributed_type: QUANTUM\n").find("unknown value 'QUANTUM'"),
            std::string::npos);
}

TEST(ConfigErrors, SageMakerIsReportedBeforeItsUnknownKeys) {
  EXPECT_EQ(load_error("ec2_instance_type: ml.p3.2xlarge\ncompute_environment: AMAZON_SAGEMAKER\n"),
            "my.yaml:2: key 'compute_environment' is AMAZON_SAGEMAKER: Amazon SageMaker is not "
            "supported by "
            "accelerate-cpp (only LOCAL_MACHINE)");
}

TEST(ConfigErrors, Fp8SyntaxDuplicatesAndEmptyFiles) {
  EXPECT_NE(load_error("mixed_precision: fp8\n").find("my.yaml:1: key 'mixed_precision' is fp8"),
            std::string::npos);
  EXPECT_EQ(load_error("debug: true\ndebug: false\n"), "my.yaml:2: key 'debug' appears twice");
  EXPECT_EQ(load_error("debug: true\nnum_processes: [1\nuse_cpu: true\n").rfind("my.yaml:", 0), 0u);
  EXPECT_NE(load_error("debug: true\nnum_processes: [1\n").find("not valid YAML"),
            std::string::npos);
  EXPECT_NE(load_error("").find("my.yaml:1: the file is empty"), std::string::npos);
  EXPECT_NE(load_error("- a\n- b\n").find("expected a mapping of config keys"), std::string::npos);
}

TEST(ConfigErrors, EveryMessageIsOneLine) {
  for (const char* text :
       {"num_proceses: 2\n", "debug: [\n", "use_cpu: 3\n", "distributed_type: XLA\n"}) {
    EXPECT_EQ(load_error(text).find('\n'), std::string::npos) << text;
  }
}

// A ConfigError, not a launcher::UsageError: src/config/ knows nothing of the
// launcher. `accelerate launch` maps it to the usage exit code itself
// (tests/launcher/launch_config_test.cpp).
TEST(ConfigErrors, ErrorsAreConfigErrors) {
  EXPECT_THROW(parse_config_text("x: 1\n", "f"), ConfigFileError);
  EXPECT_THROW(parse_config_text("x: 1\n", "f"), ConfigError);
}

TEST(ConfigErrors, MissingFilesAndFoldersAreNamed) {
  try {
    load_config_file("/nonexistent/config.yaml");
    FAIL() << "expected an error";
  } catch (const ConfigFileError& error) {
    EXPECT_STREQ(
        error.what(),
        "/nonexistent/config.yaml: cannot read the config file: No such file or directory");
  }
  testing::TemporaryFolder folder;
  EXPECT_THROW(load_config_file(folder.path()), ConfigFileError);
}

TEST(ConfigLocation, DefaultFileFollowsHfHomeThenXdgCacheHome) {
  EXPECT_EQ(
      default_config_file({{"HF_HOME", "/data/hf"}, {"XDG_CACHE_HOME", "/x"}, {"HOME", "/home/u"}}),
      "/data/hf/accelerate/default_config.yaml");
  EXPECT_EQ(default_config_file({{"XDG_CACHE_HOME", "/x"}, {"HOME", "/home/u"}}),
            "/x/huggingface/accelerate/default_config.yaml");
  EXPECT_EQ(default_config_file({{"HOME", "/home/u"}}),
            "/home/u/.cache/huggingface/accelerate/default_config.yaml");
  EXPECT_EQ(default_config_file({{"HF_HOME", "~/hf"}, {"HOME", "/home/u"}}),
            "/home/u/hf/accelerate/default_config.yaml");
}

TEST(ConfigLocation, ExplicitFileMustExistAndDefaultIsOptional) {
  testing::TemporaryFolder folder;
  const Environment env = {{"HF_HOME", folder.path()}};
  EXPECT_EQ(config_file_to_use(std::nullopt, env), std::nullopt);
  EXPECT_THROW(config_file_to_use(folder.path() + "/missing.yaml", env), ConfigFileError);
  const std::string path = folder.path() + "/accelerate/default_config.yaml";
  ::mkdir((folder.path() + "/accelerate").c_str(), 0755);
  std::ofstream(path) << "distributed_type: 'NO'\n";
  EXPECT_EQ(config_file_to_use(std::nullopt, env), path);
  EXPECT_EQ(config_file_to_use(path, env), path);
}

TEST(ConfigDescribe, ListsSettingsThenIgnoredKeys) {
  ConfigFile file = parse_config_text(
      "fsdp_config: {fsdp_version: 2}\ndistributed_type: MULTI_GPU\nfp16: true\ntpu_name: t\n",
      "f");
  std::vector<std::string> lines = describe_config_file(file);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "fsdp_config: {fsdp_version: 2}");  // a section, shown whole
  EXPECT_EQ(lines[1], "distributed_type: MULTI_GPU");
  EXPECT_EQ(lines[2], "mixed_precision: fp16");
  EXPECT_EQ(lines[3], "fp16: true (old key, read as mixed_precision)");
  EXPECT_EQ(lines[4], "tpu_name: t (ignored)");
}

}  // namespace
}  // namespace accelerate::config
