// What the Trainer prints and logs, against transformers' Trainer on the
// same settings (tests/trainer/trainer_flow_reference.py "console"): the
// printed lines have its keys in its order with each number as f"{v:.4g}",
// and the logs round what it rounds (runtimes to 4 places, rates to 3) and
// nothing else. The two runs' weights differ, so only the values that do
// not depend on them (learning rate, epoch) are compared as values.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "accelerate/tracking/python_number.h"
#include "accelerate/trainer/trainer.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "trainer_flow_support.h"

namespace trainer_console_test {
namespace {

using trainer_flow_test::FlowNet;

// A printed dict with the values that depend on the weights or the clock
// replaced by X, and our one extra key (eval_perplexity) left out.
std::string masked(const std::string& line) {
  static const std::regex varying(
      "'(loss|grad_norm|eval_loss|train_loss|\\w+_runtime|\\w+_per_second)': '[^']*'");
  static const std::regex ours_only("'eval_perplexity': '[^']*'(, )?");
  return std::regex_replace(std::regex_replace(line, ours_only, ""), varying, "'$1': X");
}

// The places transformers rounds a logged value to; -1: not rounded.
int rounded_places(const std::string& key) {
  const auto ends = [&](const std::string& suffix) {
    return key.size() >= suffix.size() &&
           key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends("_runtime")) return 4;
  if (ends("_samples_per_second") || ends("_steps_per_second")) return 3;
  return -1;
}

TEST(TrainerConsole, PrintsAndRoundsItsLogsAsTransformers) {
  REQUIRE_FLOW_REFERENCE();
  accelerate::testing::TempDir dir("trainer-console");
  const std::string file = dir.path() + "/console.txt";
  const auto ran = trainer_flow_test::run_flow_reference({"console", file});
  ASSERT_FLOW_REFERENCE_RAN(ran);
  std::vector<std::string> their_lines;
  std::vector<std::map<std::string, double>> their_logs;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("printed ", 0) == 0) their_lines.push_back(masked(line.substr(8)));
    if (line.rfind("logged ", 0) != 0) continue;
    std::istringstream items(line.substr(7));
    std::map<std::string, double> log;
    for (std::string item; items >> item;) {
      const auto equals = item.find('=');
      log[item.substr(0, equals)] = std::stod(item.substr(equals + 1));
    }
    log.erase("total_flos");  // transformers counts FLOPs; this Trainer does not
    log.erase("step");
    their_logs.push_back(log);
  }
  ASSERT_EQ(their_lines.size(), 6u) << "3 training logs, 2 evaluations, the run's metrics";

  const auto args = accelerate::TrainingArguments()
                        .output_dir(dir.path() + "/ours")
                        .per_device_train_batch_size(4)
                        .per_device_eval_batch_size(4)
                        .max_steps(6)
                        .logging_steps(2)
                        .eval_strategy(accelerate::IntervalStrategy::kSteps)
                        .eval_steps(3)
                        .save_strategy(accelerate::IntervalStrategy::kNo)
                        .learning_rate(0.01)
                        .seed(1);
  std::vector<accelerate::Metrics> our_logs;
  testing::internal::CaptureStdout();
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<accelerate::Communicator> c) {
    FlowNet model;
    accelerate::Trainer<FlowNet, accelerate::TensorDataset> trainer(
        model, args, trainer_flow_test::flow_data(40, 1),
        [](FlowNet& m, const accelerate::Example& b) {
          return torch::mse_loss(m->fc(b.data), b.target);
        },
        trainer_flow_test::flow_data(8, 2), {}, c);
    trainer.train();
    our_logs = trainer.state().log_history;
  });
  const std::string printed = testing::internal::GetCapturedStdout();
  std::vector<std::string> our_lines;
  std::istringstream lines(printed);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') our_lines.push_back(masked(line));
  EXPECT_EQ(our_lines, their_lines) << printed;

  ASSERT_EQ(our_logs.size(), their_logs.size());
  for (std::size_t i = 0; i < our_logs.size(); ++i) {
    our_logs[i].erase("step");
    our_logs[i].erase("eval_perplexity");
    std::vector<std::string> our_keys, their_keys;
    for (const auto& [key, value] : our_logs[i]) our_keys.push_back(key);
    for (const auto& [key, value] : their_logs[i]) their_keys.push_back(key);
    EXPECT_EQ(our_keys, their_keys) << "log " << i;
    for (const auto& [key, value] : their_logs[i]) {
      if (!our_logs[i].count(key)) continue;
      const double ours = our_logs[i].at(key);
      const int places = rounded_places(key);
      if (places >= 0) {
        // Theirs is rounded there (so the rule is transformers'), and ours too.
        EXPECT_EQ(value, accelerate::python_round(value, places)) << key;
        EXPECT_EQ(ours, accelerate::python_round(ours, places)) << key;
      } else if (key == "epoch" || key == "learning_rate") {
        EXPECT_NEAR(ours, value, 1e-12 * std::max(1.0, std::abs(value))) << key << " in log " << i;
      } else if (key == "loss" || key == "train_loss" || key == "eval_loss") {
        // Not rounded by either: with 4 places there, these would be.
        EXPECT_NE(ours, accelerate::python_round(ours, 4)) << key;
      }
    }
  }
}

}  // namespace
}  // namespace trainer_console_test
