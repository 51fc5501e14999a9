// The examples' one command-line parser (examples/common/example_flags.h):
// both value forms, switches, the last value winning, every malformed input
// as one FlagError; then every example program as a child process: --help
// prints a usage line with all of its flags (the names scripts, benches and
// tests pass) and exits 0, an unknown flag or a bad value is one error line
// and exit code 2, and a 2-process run prints its result once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/example_flags.h"
#include "support/launcher_process.h"

namespace accelerate::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;

struct Declared {
  std::string text = "default";
  int count = 3;
  int64_t max_steps = 200;
  uint64_t seed = 42;
  double rate = 1e-3;
  bool fast = false;
  std::string mode = "steps";
};

examples::Flags flags_for(Declared& d) {
  examples::Flags flags("About the program.");
  flags.add("text", &d.text, "some text", "DIR")
      .add("count", &d.count, "a count")
      .add("max_steps", &d.max_steps, "steps")
      .add("seed", &d.seed, "a seed")
      .add("rate", &d.rate, "a rate")
      .add("fast", &d.fast, "a switch")
      .add_choice("mode", &d.mode, {"no", "steps", "epoch"}, "when");
  return flags;
}

// The FlagError message try_parse throws for `words`, or "" when none.
std::string error_of(const std::vector<std::string>& words) {
  Declared d;
  auto flags = flags_for(d);
  try {
    flags.try_parse(words);
  } catch (const examples::FlagError& error) {
    return error.what();
  }
  return "";
}

TEST(ExampleFlags, NoWordsKeepTheDefaults) {
  Declared d;
  auto flags = flags_for(d);
  EXPECT_TRUE(flags.try_parse({}));
  EXPECT_EQ(d.text, "default");
  EXPECT_EQ(d.count, 3);
  EXPECT_EQ(d.max_steps, 200);
  EXPECT_EQ(d.seed, 42u);
  EXPECT_EQ(d.rate, 1e-3);
  EXPECT_FALSE(d.fast);
  EXPECT_EQ(d.mode, "steps");
}

TEST(ExampleFlags, ValuesComeAsTheNextWordOrAfterEquals) {
  Declared d;
  auto flags = flags_for(d);
  EXPECT_TRUE(flags.try_parse({"--text", "a b", "--count=7", "--max_steps", "-1", "--seed=5",
                               "--rate", "-2.5e-4", "--mode=epoch"}));
  EXPECT_EQ(d.text, "a b");
  EXPECT_EQ(d.count, 7);
  EXPECT_EQ(d.max_steps, -1);  // a negative number is a value, not a flag
  EXPECT_EQ(d.seed, 5u);
  EXPECT_EQ(d.rate, -2.5e-4);
  EXPECT_EQ(d.mode, "epoch");
}

TEST(ExampleFlags, TheLastValueOfARepeatedFlagWins) {
  Declared d;
  auto flags = flags_for(d);
  EXPECT_TRUE(flags.try_parse({"--count", "1", "--count=2", "--count", "9"}));
  EXPECT_EQ(d.count, 9);
}

TEST(ExampleFlags, SwitchesTakeNoValueOrAnExplicitTrueOrFalse) {
  for (const auto& [words, expected] : std::vector<std::pair<std::vector<std::string>, bool>>{
           {{"--fast"}, true},
           {{"--fast", "--count", "1"}, true},
           {{"--fast=false"}, false},
           {{"--fast", "true"}, true},
           {{"--fast", "false"}, false},
           {{"--fast", "--fast=false"}, false}}) {
    Declared d;
    auto flags = flags_for(d);
    EXPECT_TRUE(flags.try_parse(words));
    EXPECT_EQ(d.fast, expected) << ::testing::PrintToString(words);
  }
  // A switch does not swallow another word.
  EXPECT_EQ(error_of({"--fast", "yes"}), "unexpected argument 'yes'");
  EXPECT_EQ(error_of({"--fast=yes"}), "--fast expects true or false, got 'yes'");
}

TEST(ExampleFlags, HelpStopsParsing) {
  for (const std::string help : {"--help", "-h"}) {
    Declared d;
    auto flags = flags_for(d);
    EXPECT_FALSE(flags.try_parse({"--count", "5", help, "--count", "6", "--nonsense"}));
    EXPECT_EQ(d.count, 5);
  }
}

TEST(ExampleFlags, EveryMalformedInputIsOneMessageNamingTheFlag) {
  EXPECT_EQ(error_of({"--max_step", "3"}), "unknown flag --max_step (did you mean --max_steps?)");
  EXPECT_EQ(error_of({"--cuont=3"}), "unknown flag --cuont (did you mean --count?)");
  EXPECT_EQ(error_of({"--zzz"}), "unknown flag --zzz");  // nothing near it
  EXPECT_EQ(error_of({"-x"}), "unknown flag -x");
  EXPECT_EQ(error_of({"stray"}), "unexpected argument 'stray'");
  EXPECT_EQ(error_of({"--count", "1", "2"}), "unexpected argument '2'");
  EXPECT_EQ(error_of({"--"}), "unexpected argument '--'");
  EXPECT_EQ(error_of({"--count"}), "--count needs a value (INT)");
  EXPECT_EQ(error_of({"--text", "--count", "1"}), "--text needs a value (DIR)");
  EXPECT_EQ(error_of({"--count", "x"}), "--count expects an integer, got 'x'");
  EXPECT_EQ(error_of({"--count", "1.5"}), "--count expects an integer, got '1.5'");
  EXPECT_EQ(error_of({"--count", "99999999999"}), "--count expects an integer, got '99999999999'");
  EXPECT_EQ(error_of({"--count="}), "--count expects an integer, got ''");
  EXPECT_EQ(error_of({"--seed", "-1"}), "--seed expects a non-negative integer, got '-1'");
  EXPECT_EQ(error_of({"--rate", "fast"}), "--rate expects a number, got 'fast'");
  EXPECT_EQ(error_of({"--rate", "inf"}), "--rate expects a number, got 'inf'");
  EXPECT_EQ(error_of({"--mode", "sometimes"}),
            "--mode expects no, steps or epoch, got 'sometimes'");
}

TEST(ExampleFlags, TheUsageListsEveryFlagWithItsDefault) {
  Declared d;
  auto flags = flags_for(d);
  const std::string usage = flags.usage();
  EXPECT_THAT(usage, StartsWith("usage: program [--text DIR] [--count INT] [--max_steps INT] "
                                "[--seed INT] [--rate FLOAT] [--fast] [--mode no|steps|epoch] "
                                "[-h]\n"));
  EXPECT_THAT(usage, HasSubstr("\nAbout the program.\n"));
  EXPECT_THAT(usage,
              HasSubstr("\nflags:\n  --text DIR             some text (default: default)\n"));
  EXPECT_THAT(usage, HasSubstr("  --count INT            a count (default: 3)\n"));
  EXPECT_THAT(usage, HasSubstr("  --rate FLOAT           a rate (default: 0.001)\n"));
  EXPECT_THAT(usage, HasSubstr("  --fast                 a switch\n"));
  EXPECT_THAT(usage, HasSubstr("  -h, --help             print this help and exit\n"));
}

TEST(ExampleFlags, AFlagDeclaredTwiceIsAProgrammingError) {
  int a = 0, b = 0;
  examples::Flags flags;
  flags.add("a", &a, "");
  EXPECT_THROW(flags.add("a", &b, ""), std::logic_error);
  EXPECT_THROW(flags.add("help", &b, ""), std::logic_error);
}

// The programs. `flags`: every flag the program accepted before the shared
// parser, by the names scripts, benches and tests pass.
struct Program {
  std::string name;  // as its usage and errors name it
  std::string path;
  std::vector<std::string> command;  // words before the flags ("generate")
  std::vector<std::string> flags;
  std::vector<std::string> bad_value;  // a declared flag with a value it refuses
};

const std::vector<std::string> kMnistFlags{"data_dir", "epochs", "batch_size", "lr", "seed"};

std::vector<Program> programs() {
  std::vector<std::string> complete = kMnistFlags;
  complete.insert(complete.end(), {"with_tracking", "project_dir", "output_dir",
                                   "checkpointing_steps", "resume_from_checkpoint"});
  return {
      {"mnist", MNIST_PATH, {}, kMnistFlags, {"--epochs", "three"}},
      {"mnist_plain", MNIST_PLAIN_PATH, {}, kMnistFlags, {"--lr=fast"}},
      {"mnist_complete", MNIST_COMPLETE_PATH, {}, complete, {"--checkpointing_steps", "0"}},
      {"libtorch_mnist", LIBTORCH_MNIST_PATH, {}, kMnistFlags, {"--batch_size", "-1"}},
      {"libtorch_mnist_plain", LIBTORCH_MNIST_PLAIN_PATH, {}, kMnistFlags, {"--seed", "x"}},
      {"hello_distributed", HELLO_DISTRIBUTED_PATH, {}, {"intervals"}, {"--intervals", "0"}},
      {"gpt",
       GPT_PATH,
       {},
       {"data_dir",
        "preset",
        "vocab_size",
        "block_size",
        "dropout",
        "max_eval_samples",
        "output_dir",
        "per_device_train_batch_size",
        "per_device_eval_batch_size",
        "gradient_accumulation_steps",
        "learning_rate",
        "weight_decay",
        "max_grad_norm",
        "num_train_epochs",
        "max_steps",
        "lr_scheduler_type",
        "warmup_steps",
        "warmup_ratio",
        "logging_strategy",
        "logging_steps",
        "logging_first_step",
        "eval_strategy",
        "eval_steps",
        "eval_delay",
        "save_strategy",
        "save_steps",
        "save_only_model",
        "load_best_model_at_end",
        "metric_for_best_model",
        "greater_is_better",
        "save_total_limit",
        "resume_from_checkpoint",
        "seed",
        "bf16",
        "fp16",
        "gradient_checkpointing",
        "report_to",
        "dataloader_num_workers"},
       {"--eval_strategy", "sometimes"}},
      {"nlp",
       NLP_PATH,
       {},
       {"model",
        "train_file",
        "validation_file",
        "mixed_precision",
        "cpu",
        "checkpointing_steps",
        "resume_from_checkpoint",
        "with_tracking",
        "output_dir",
        "project_dir",
        "num_epochs",
        "learning_rate",
        "seed",
        "batch_size",
        "eval_batch_size",
        "gradient_accumulation_steps",
        "num_warmup_steps",
        "max_length",
        "max_train_samples",
        "max_eval_samples"},
       {"--checkpointing_steps", "0"}},
      {"finetune",
       FINETUNE_PATH,
       {},
       {"model", "train_file", "validation_file", "block_size", "max_shard_size", "output_dir",
        "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "max_steps",
        "lr_scheduler_type", "warmup_steps", "logging_steps", "eval_strategy", "save_steps",
        "resume_from_checkpoint", "seed", "bf16"},
       {"--block_size", "big"}},
      {"gpt generate",
       GPT_PATH,
       {"generate"},
       {"model_dir", "prompt", "max_new_tokens", "temperature", "top_k", "seed"},
       {"--top_k", "many"}},
  };
}

RunResult run_with(const Program& program, const std::vector<std::string>& words) {
  std::vector<std::string> argv{program.path};
  argv.insert(argv.end(), program.command.begin(), program.command.end());
  argv.insert(argv.end(), words.begin(), words.end());
  return run_program(argv, {}, 60s);
}

class ExampleProgram : public ::testing::TestWithParam<Program> {};

TEST_P(ExampleProgram, HelpPrintsAUsageLineWithEveryFlagAndExitsZero) {
  const Program& program = GetParam();
  for (const std::string help : {"--help", "-h"}) {
    const auto result = run_with(program, {help});
    ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
    EXPECT_EQ(result.err, "");
    const auto lines = split_lines(result.out);
    ASSERT_FALSE(lines.empty());
    EXPECT_THAT(lines[0], StartsWith("usage: " + program.name + " [--"));
    for (const auto& flag : program.flags) {
      EXPECT_THAT(lines[0], AnyOf(HasSubstr("[--" + flag + "]"), HasSubstr("[--" + flag + " ")))
          << flag;
      EXPECT_THAT(result.out, HasSubstr("\n  --" + flag)) << flag << " has no help line";
    }
  }
}

TEST_P(ExampleProgram, AnUnknownFlagIsOneErrorLineAndExitCodeTwo) {
  const Program& program = GetParam();
  const auto result = run_with(program, {"--no_such_flag", "1"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, program.name + ": error: unknown flag --no_such_flag; '" + program.name +
                            " --help' lists the flags\n");
}

TEST_P(ExampleProgram, ABadValueIsOneErrorLineNamingTheFlagAndExitCodeTwo) {
  const Program& program = GetParam();
  const auto result = run_with(program, program.bad_value);
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.out, "");
  const auto lines = split_lines(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_THAT(lines[0], StartsWith(program.name + ": error: " +
                                   program.bad_value[0].substr(0, program.bad_value[0].find('='))));
  EXPECT_THAT(lines[0], HasSubstr("'" + program.name + " --help' lists the flags"));
}

INSTANTIATE_TEST_SUITE_P(Examples, ExampleProgram, ::testing::ValuesIn(programs()),
                         [](const ::testing::TestParamInfo<Program>& info) {
                           std::string name = info.param.name;
                           for (char& c : name) {
                             if (c == ' ') c = '_';
                           }
                           return name;
                         });

// Data an example cannot find is bad input, as a bad flag: one line naming
// the flag that sets the path and the script that fetches the default data,
// and exit code 2 in every example.
TEST(ExampleData, AMissingDataPathNamesItsFlagAndScriptWithExitCodeTwo) {
  const std::string none = "/nonexistent/accelerate-example-data";
  // A model folder with the files nlp looks for, so its data files are next.
  const std::string model = ::testing::TempDir() + "/example-data-model";
  std::filesystem::create_directories(model);
  for (const char* name : {"config.json", "tokenizer.json"})
    std::ofstream(model + "/" + name) << "{}";
  struct Case {
    std::string name, path;
    std::vector<std::string> words, mentions;
  };
  const std::vector<Case> cases = {
      {"mnist", MNIST_PATH, {"--data_dir", none}, {"--data_dir", "scripts/fetch-mnist.sh"}},
      {"mnist_plain", MNIST_PLAIN_PATH, {"--data_dir", none}, {"--data_dir", "fetch-mnist.sh"}},
      {"mnist_complete", MNIST_COMPLETE_PATH, {"--data_dir", none}, {"--data_dir", "fetch-mnist"}},
      {"libtorch_mnist", LIBTORCH_MNIST_PATH, {"--data_dir", none}, {"--data_dir", "fetch-mnist"}},
      {"gpt", GPT_PATH, {"--data_dir", none}, {"--data_dir", "scripts/fetch-brown.sh"}},
      {"nlp", NLP_PATH, {"--model", none}, {"--model", "scripts/fetch-minilm.sh"}},
      {"nlp",
       NLP_PATH,
       {"--model", model, "--train_file", none},
       {"--train_file", "fetch-brown-genre.sh"}},
      {"finetune", FINETUNE_PATH, {"--model", none, "--train_file", none}, {"--model", none}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv{c.path};
    argv.insert(argv.end(), c.words.begin(), c.words.end());
    const auto result = run_program(argv, {}, 60s);
    EXPECT_EQ(result.exit_code, 2) << c.name << ": " << result.err;
    const auto lines = split_lines(result.err);
    ASSERT_EQ(lines.size(), 1u) << c.name << ": " << result.err;
    EXPECT_THAT(lines[0], StartsWith(c.name + ": error: ")) << c.name;
    for (const auto& mention : c.mentions) EXPECT_THAT(lines[0], HasSubstr(mention)) << c.name;
  }
}

// The TrainingArguments flags reach the Trainer's own checks: save_strategy
// best without a metric is refused as TrainingArguments refuses it.
TEST(ExampleTrainingFlags, BestWithoutAMetricIsTheTrainingArgumentsError) {
  const auto result = run_program(
      {GPT_PATH, "--save_strategy", "best", "--logging_strategy", "epoch", "--max_steps", "1"}, {},
      60s);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("save_strategy best requires metric_for_best_model"));
  EXPECT_EQ(split_lines(result.err).size(), 1u) << result.err;
}

// Flags reach every process through the launcher, and the result line comes
// from the main process only (the MNIST programs' accuracy lines are checked
// the same way by mnist_accuracy.sh on their 2-process runs).
TEST(ExampleOutput, TwoProcessesPrintTheResultOnce) {
  const auto result =
      run_launcher({"launch", "--cpu", "--num_processes", "2", "--main_process_port", "0",
                    HELLO_DISTRIBUTED_PATH, "--intervals=1000"},
                   {}, 60s);
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  int results = 0;
  for (const auto& line : split_lines(result.out)) {
    if (line.find("pi ~= ") != std::string::npos) {
      ++results;
      EXPECT_THAT(line, StartsWith("[rank0]: pi ~= 3.14159")) << line;
    }
  }
  EXPECT_EQ(results, 1) << result.out;
  EXPECT_THAT(result.out, HasSubstr("[rank1]: process 1 of 2 integrated 500 intervals"));
}

}  // namespace
}  // namespace accelerate::testing
