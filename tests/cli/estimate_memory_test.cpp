// `accelerate estimate-memory`: the arithmetic (Hugging Face Accelerate's
// formulas, so both tools agree), the parsing of parameter counts, reading
// safetensors headers, and one-line errors for bad input.
#include <gtest/gtest.h>

#include <array>

#include "cli/cli_test_support.h"
#include "cli/memory_estimate.h"

namespace accelerate::cli {
namespace {

using testing::run_accelerate;
using testing::table_rows;
using testing::TemporaryFolder;
using testing::write_file;
using testing::write_safetensors;

TEST(ParameterCount, AcceptsSuffixesExponentsAndPlainIntegers) {
  EXPECT_EQ(parse_parameter_count("7B"), 7'000'000'000ULL);
  EXPECT_EQ(parse_parameter_count("7b"), 7'000'000'000ULL);
  EXPECT_EQ(parse_parameter_count("350M"), 350'000'000ULL);
  EXPECT_EQ(parse_parameter_count("1.5k"), 1'500ULL);
  EXPECT_EQ(parse_parameter_count("2T"), 2'000'000'000'000ULL);
  EXPECT_EQ(parse_parameter_count("1.3G"), 1'300'000'000ULL);
  EXPECT_EQ(parse_parameter_count("1.3e9"), 1'300'000'000ULL);  // exact, not 1299999999
  EXPECT_EQ(parse_parameter_count("1E3"), 1'000ULL);
  EXPECT_EQ(parse_parameter_count("125000000"), 125'000'000ULL);
  EXPECT_EQ(parse_parameter_count("0.5k"), 500ULL);
  EXPECT_EQ(parse_parameter_count("1e15"), 1'000'000'000'000'000ULL);
}

TEST(ParameterCount, RejectsAnythingElse) {
  for (const char* bad : {"",    "0",   "0.0B", "-5",  "1.5", "2.5e-3k", "abc",
                          "7X",  "7BB", "1e",   "e9",  ".",   "1e16",    "99999999999999999999",
                          "inf", "nan", "0x10", " 7B", "7 B", "1,000"}) {
    EXPECT_FALSE(parse_parameter_count(bad).has_value()) << bad;
  }
}

TEST(FormatBytes, MatchesAccelerateRounding) {
  EXPECT_EQ(format_bytes(4e9), "3.73 GB");
  EXPECT_EQ(format_bytes(16e9), "14.9 GB");
  EXPECT_EQ(format_bytes(1e9), "953.67 MB");
  EXPECT_EQ(format_bytes(1024), "1.0 KB");
  EXPECT_EQ(format_bytes(1536), "1.5 KB");
  EXPECT_EQ(format_bytes(512, /*integral=*/true), "512 bytes");
  EXPECT_EQ(format_bytes(512), "512.0 bytes");
  EXPECT_EQ(format_bytes(1023.999), "1024.0 bytes");
  EXPECT_EQ(format_bytes(1e18), "888.18 PB");
}

TEST(TrainingWithAdam, FourTimesInFloat32TwiceInMixedPrecisionNoneQuantized) {
  EXPECT_EQ(training_bytes_with_adam(4'000'000'000ULL, "float32"), 16'000'000'000ULL);
  EXPECT_EQ(training_bytes_with_adam(4'000'000'000ULL, "float16"), 8'000'000'000ULL);
  EXPECT_EQ(training_bytes_with_adam(4'000'000'000ULL, "bfloat16"), 8'000'000'000ULL);
  EXPECT_FALSE(training_bytes_with_adam(4'000'000'000ULL, "int8").has_value());
  EXPECT_FALSE(training_bytes_with_adam(4'000'000'000ULL, "int4").has_value());
}

TEST(EstimateMemoryCommand, OneBillionParametersGivesAccelerateNumbers) {
  auto result = run_accelerate({"estimate-memory", "1e9"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("1,000,000,000 parameters"), std::string::npos) << result.out;
  const auto rows = table_rows(result.out);
  using Row = std::vector<std::string>;
  ASSERT_EQ(rows.size(), 5u) << result.out;
  EXPECT_EQ(rows.at("float32"), (Row{"N/A", "3.73 GB", "14.9 GB"}));
  EXPECT_EQ(rows.at("float16"), (Row{"N/A", "1.86 GB", "7.45 GB"}));
  EXPECT_EQ(rows.at("bfloat16"), (Row{"N/A", "1.86 GB", "7.45 GB"}));
  EXPECT_EQ(rows.at("int8"), (Row{"N/A", "953.67 MB", "N/A"}));
  EXPECT_EQ(rows.at("int4"), (Row{"N/A", "476.84 MB", "N/A"}));
}

TEST(EstimateMemoryCommand, DtypesSelectsRowsInTheGivenOrder) {
  auto result = run_accelerate({"estimate-memory", "7B", "--dtypes", "int4", "float32"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto int4 = result.out.find("int4");
  const auto float32 = result.out.find("float32");
  ASSERT_NE(int4, std::string::npos);
  ASSERT_NE(float32, std::string::npos);
  EXPECT_LT(int4, float32);
  const auto rows = table_rows(result.out);
  EXPECT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows.at("float32")[1], "26.08 GB");
  EXPECT_EQ(rows.at("float32")[2], "104.31 GB");
}

// 4x8 + 8 F16 elements in layer "encoder.a", 2x2 F32 in "encoder.b", and an
// I64 buffer of 3: 47 parameters; in float32 terms a = 160 bytes, b = 16,
// pos = 24 (integers keep their size), 200 in all.
const char* const kHeader =
    R"({"__metadata__":{"format":"pt"},)"
    R"("encoder.a.weight":{"dtype":"F16","shape":[4,8],"data_offsets":[0,64]},)"
    R"("encoder.a.bias":{"dtype":"F16","shape":[8],"data_offsets":[64,80]},)"
    R"("encoder.b.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[80,96]},)"
    R"("pos":{"dtype":"I64","shape":[3],"data_offsets":[96,120]}})";

void expect_small_model_rows(const testing::RunResult& result) {
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("47 parameters, largest layer 'encoder.a'"), std::string::npos)
      << result.out;
  const auto rows = table_rows(result.out);
  using Row = std::vector<std::string>;
  ASSERT_EQ(rows.size(), 5u) << result.out;
  EXPECT_EQ(rows.at("float32"), (Row{"160 bytes", "200 bytes", "800 bytes"}));
  EXPECT_EQ(rows.at("float16"), (Row{"80.0 bytes", "100.0 bytes", "400 bytes"}));
  EXPECT_EQ(rows.at("bfloat16"), (Row{"80.0 bytes", "100.0 bytes", "400 bytes"}));
  EXPECT_EQ(rows.at("int8"), (Row{"40.0 bytes", "50.0 bytes", "N/A"}));
  EXPECT_EQ(rows.at("int4"), (Row{"20.0 bytes", "25.0 bytes", "N/A"}));
}

TEST(EstimateMemoryCommand, ReadsASafetensorsHeader) {
  TemporaryFolder folder;
  const std::string path = folder.path() + "/model.safetensors";
  write_safetensors(path, kHeader, 120);
  expect_small_model_rows(run_accelerate({"estimate-memory", path}));
  // The directory holding it works too.
  expect_small_model_rows(run_accelerate({"estimate-memory", folder.path()}));
}

TEST(EstimateMemoryCommand, ReadsAShardedModelThroughItsIndexOrItsDirectory) {
  TemporaryFolder folder;
  write_safetensors(folder.path() + "/model-00001-of-00002.safetensors",
                    R"({"encoder.a.weight":{"dtype":"F16","shape":[4,8],"data_offsets":[0,64]},)"
                    R"("encoder.a.bias":{"dtype":"F16","shape":[8],"data_offsets":[64,80]}})",
                    80);
  write_safetensors(folder.path() + "/model-00002-of-00002.safetensors",
                    R"({"encoder.b.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                    R"("pos":{"dtype":"I64","shape":[3],"data_offsets":[16,40]}})",
                    40);
  write_file(folder.path() + "/model.safetensors.index.json",
             R"({"metadata":{"total_size":120},"weight_map":{)"
             R"("encoder.a.weight":"model-00001-of-00002.safetensors",)"
             R"("encoder.a.bias":"model-00001-of-00002.safetensors",)"
             R"("encoder.b.weight":"model-00002-of-00002.safetensors",)"
             R"("pos":"model-00002-of-00002.safetensors"}})");
  expect_small_model_rows(
      run_accelerate({"estimate-memory", folder.path() + "/model.safetensors.index.json"}));
  expect_small_model_rows(run_accelerate({"estimate-memory", folder.path()}));
}

// Bad input: exit code 2 and exactly one line on stderr naming the problem.
void expect_one_line_error(const std::vector<std::string>& args, const std::string& mention) {
  auto result = run_accelerate(args);
  EXPECT_EQ(result.exit_code, 2) << result.out << result.err;
  const auto lines = testing::split_lines(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_EQ(lines[0].rfind("accelerate estimate-memory: error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(mention), std::string::npos) << lines[0];
  EXPECT_EQ(result.out, "");
}

TEST(EstimateMemoryCommand, BadArgumentsAreOneLineErrors) {
  expect_one_line_error({"estimate-memory"}, "MODEL is missing");
  expect_one_line_error({"estimate-memory", "seven-billion"},
                        "'seven-billion' is neither a parameter count");
  expect_one_line_error({"estimate-memory", "bert-base-cased"},
                        "Hub names are not downloaded: give the folder of a downloaded copy");
  expect_one_line_error({"estimate-memory", "meta-llama/Llama-2-7b-hf"},
                        "Hub names are not downloaded");
  expect_one_line_error({"estimate-memory", "0"}, "'0' is neither");
  expect_one_line_error({"estimate-memory", "1.5"}, "'1.5' is neither");
  expect_one_line_error({"estimate-memory", "7B", "--dtypes", "float33"},
                        "unknown dtype 'float33'");
  expect_one_line_error({"estimate-memory", "7B", "--dtypes"}, "--dtypes expects at least one");
  expect_one_line_error({"estimate-memory", "7B", "--frobnicate"}, "unknown option '--frobnicate'");
  expect_one_line_error({"estimate-memory", "7B", "8B"}, "one MODEL only");
}

TEST(EstimateMemoryCommand, BadFilesAreOneLineErrorsNamingTheFile) {
  TemporaryFolder folder;
  const std::string truncated = folder.path() + "/truncated.safetensors";
  write_safetensors(truncated, kHeader, 100);  // 20 bytes short
  expect_one_line_error({"estimate-memory", truncated}, truncated);

  const std::string garbage = folder.path() + "/garbage.safetensors";
  write_file(garbage, "not a safetensors file at all");
  expect_one_line_error({"estimate-memory", garbage}, garbage);

  const std::string pickle = folder.path() + "/pytorch_model.bin";
  write_file(pickle, std::string("\x80\x02}q\x00(X\x06\x00\x00\x00weightq", 19));
  expect_one_line_error({"estimate-memory", pickle},
                        "reads .safetensors files and safetensors indexes only");

  const std::string index = folder.path() + "/model.safetensors.index.json";
  write_file(index, R"({"weight_map":{"w":"missing.safetensors"}})");
  expect_one_line_error({"estimate-memory", index}, "shard 'missing.safetensors' is missing");
  write_file(index, R"({"weight_map": )");
  expect_one_line_error({"estimate-memory", index}, "not valid JSON");
  write_file(index, R"({"metadata":{}})");
  expect_one_line_error({"estimate-memory", index}, "no \"weight_map\"");

  TemporaryFolder empty;
  expect_one_line_error({"estimate-memory", empty.path()},
                        "no model.safetensors.index.json or *.safetensors");
}

TEST(EstimateMemoryCommand, HelpListsTheDtypes) {
  auto result = run_accelerate({"estimate-memory", "--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("float32 float16 bfloat16 int8 int4"), std::string::npos) << result.out;
}

// --num_processes: per-process model state under ZeRO stages 0, 1, 2, all in
// the weights' dtype. For W bytes of weights on N processes: 4W, 2W + 2W/N,
// W + 3W/N (float32: the ZeRO paper's 16P, 8P + 8P/N, 4P + 12P/N).

using Stages = std::array<double, 3>;

TEST(ZeroEstimate, OneBillionParametersOnTwoAndFourProcesses) {
  const ModelSize size = model_size_from_count(1'000'000'000ULL);
  const std::vector<std::string> dtypes = {"float32", "bfloat16", "float16", "int8", "int4"};

  const auto two = zero_estimate_rows(size, dtypes, 2);
  ASSERT_EQ(two.size(), 5u);
  EXPECT_EQ(two[0].dtype, "float32");
  EXPECT_EQ(two[0].per_process, (Stages{16e9, 12e9, 10e9}));
  EXPECT_EQ(two[1].dtype, "bfloat16");
  EXPECT_EQ(two[1].per_process, (Stages{8e9, 6e9, 5e9}));
  EXPECT_EQ(two[2].per_process, (Stages{8e9, 6e9, 5e9}));
  EXPECT_EQ(two[3].dtype, "int8");
  EXPECT_FALSE(two[3].per_process.has_value());
  EXPECT_EQ(two[4].dtype, "int4");
  EXPECT_FALSE(two[4].per_process.has_value());

  const auto four = zero_estimate_rows(size, dtypes, 4);
  ASSERT_EQ(four.size(), 5u);
  EXPECT_EQ(four[0].per_process, (Stages{16e9, 10e9, 7e9}));
  EXPECT_EQ(four[1].per_process, (Stages{8e9, 5e9, 3.5e9}));
  EXPECT_FALSE(four[3].per_process.has_value());
  EXPECT_FALSE(four[4].per_process.has_value());
}

TEST(ZeroEstimate, OneProcessShardsNothingAndManyApproachTheParameterShare) {
  const ModelSize size = model_size_from_count(1'000'000'000ULL);
  EXPECT_EQ(zero_estimate_rows(size, {"float32"}, 1)[0].per_process, (Stages{16e9, 16e9, 16e9}));
  // 1000 processes: 8P + 8P/N = 8.008e9, 4P + 12P/N = 4.012e9.
  const auto many = *zero_estimate_rows(size, {"float32"}, 1000)[0].per_process;
  EXPECT_EQ(many[0], 16e9);
  EXPECT_DOUBLE_EQ(many[1], 8.008e9);
  EXPECT_DOUBLE_EQ(many[2], 4.012e9);
}

TEST(ZeroEstimate, RendersTheTableInTheEstimateStyle) {
  const auto rows = zero_estimate_rows(model_size_from_count(1'000'000'000ULL),
                                       {"float32", "bfloat16", "int8"}, 4);
  EXPECT_EQ(
      render_zero_estimate(rows, 4),
      "ZeRO model state per process on 4 processes (parameters + gradients + Adam states, no "
      "activations):\n"
      "┌──────────┬──────────────┬──────────────┬──────────────┐\n"
      "│  dtype   │ ZeRO stage 0 │ ZeRO stage 1 │ ZeRO stage 2 │\n"
      "├──────────┼──────────────┼──────────────┼──────────────┤\n"
      "│ float32  │   14.9 GB    │   9.31 GB    │   6.52 GB    │\n"
      "│ bfloat16 │   7.45 GB    │   4.66 GB    │   3.26 GB    │\n"
      "│   int8   │     N/A      │     N/A      │     N/A      │\n"
      "└──────────┴──────────────┴──────────────┴──────────────┘\n"
      "Stage 0: data parallel, nothing sharded; stage 1 shards Adam's states; stage 2 also the "
      "gradients. All in the weights' dtype.\n");
}

TEST(ZeroEstimate, SmallModelsShowWholeAndFractionalBytes) {
  // 50 parameters: 200 bytes in float32, 100 in float16; on 3 processes
  // float32 gives 800, 400 + 400/3, 200 + 600/3 = 400.
  const auto rows = zero_estimate_rows(model_size_from_count(50), {"float32", "float16"}, 3);
  const std::string text = render_zero_estimate(rows, 3);
  EXPECT_NE(text.find("│ float32 │  800 bytes   │ 533.33 bytes │  400 bytes   │\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("│ float16 │  400 bytes   │ 266.67 bytes │  200 bytes   │\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(render_zero_estimate(zero_estimate_rows(model_size_from_count(50), {"int4"}, 1), 1)
                .rfind("ZeRO model state per process on 1 process (", 0),
            0u);
}

// The output of `estimate-memory 1B --dtypes float32 int8` before
// --num_processes existed; it must not change.
const char* const kOneBillionTable =
    "Memory usage for loading `1B`: 1,000,000,000 parameters\n"
    "┌─────────┬───────────────┬────────────┬─────────────────────┐\n"
    "│  dtype  │ Largest Layer │ Total Size │ Training using Adam │\n"
    "├─────────┼───────────────┼────────────┼─────────────────────┤\n"
    "│ float32 │      N/A      │  3.73 GB   │       14.9 GB       │\n"
    "│  int8   │      N/A      │ 953.67 MB  │         N/A         │\n"
    "└─────────┴───────────────┴────────────┴─────────────────────┘\n"
    "Training using Adam: the largest of weights, gradients, optimizer states and the step at "
    "batch size 1, without activations.\n";

TEST(EstimateMemoryCommand, WithoutNumProcessesTheOutputIsUnchanged) {
  auto result = run_accelerate({"estimate-memory", "1B", "--dtypes", "float32", "int8"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, kOneBillionTable);
  EXPECT_EQ(result.err, "");
}

TEST(EstimateMemoryCommand, NumProcessesAddsTheZeroTableAfterTheEstimate) {
  const std::string zero_table =
      "ZeRO model state per process on 2 processes (parameters + gradients + Adam states, no "
      "activations):\n"
      "┌─────────┬──────────────┬──────────────┬──────────────┐\n"
      "│  dtype  │ ZeRO stage 0 │ ZeRO stage 1 │ ZeRO stage 2 │\n"
      "├─────────┼──────────────┼──────────────┼──────────────┤\n"
      "│ float32 │   14.9 GB    │   11.18 GB   │   9.31 GB    │\n"
      "│  int8   │     N/A      │     N/A      │     N/A      │\n"
      "└─────────┴──────────────┴──────────────┴──────────────┘\n"
      "Stage 0: data parallel, nothing sharded; stage 1 shards Adam's states; stage 2 also the "
      "gradients. All in the weights' dtype.\n";
  const std::string expected = std::string(kOneBillionTable) + "\n" + zero_table;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"estimate-memory", "1B", "--dtypes", "float32", "int8", "--num_processes", "2"},
           {"estimate-memory", "1B", "--num_processes=2", "--dtypes", "float32", "int8"},
           {"estimate-memory", "--num-processes", "2", "1B", "--dtypes", "float32", "int8"}}) {
    auto result = run_accelerate(args);
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(result.out, expected) << args[2] << " " << args[3];
  }
}

TEST(EstimateMemoryCommand, BadNumProcessesAreOneLineErrors) {
  const std::string expects = "expects a whole number from 1 to 1000000, got ";
  expect_one_line_error({"estimate-memory", "7B", "--num_processes", "0"},
                        "--num_processes " + expects + "'0'");
  expect_one_line_error({"estimate-memory", "7B", "--num_processes", "-1"},
                        "--num_processes " + expects + "'-1'");
  expect_one_line_error({"estimate-memory", "7B", "--num_processes", "x"},
                        "--num_processes " + expects + "'x'");
  expect_one_line_error({"estimate-memory", "7B", "--num_processes", "2.5"}, expects + "'2.5'");
  expect_one_line_error({"estimate-memory", "7B", "--num_processes", "1000001"},
                        expects + "'1000001'");
  expect_one_line_error({"estimate-memory", "7B", "--num_processes=0"},
                        "--num_processes " + expects + "'0'");
  expect_one_line_error({"estimate-memory", "7B", "--num_processes="},
                        "--num_processes " + expects + "''");
  expect_one_line_error({"estimate-memory", "7B", "--num_processes"},
                        "--num_processes needs a value (a whole number from 1 to 1000000)");
}

TEST(EstimateMemoryCommand, HelpDescribesNumProcesses) {
  auto result = run_accelerate({"estimate-memory", "--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("[--num_processes N]"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("  --num_processes N     "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("ZeRO stage 0"), std::string::npos) << result.out;
}

}  // namespace
}  // namespace accelerate::cli
