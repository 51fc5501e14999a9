// What the tests that run transformers' Trainer beside this one share
// (trainer_flow_test.cpp, trainer_flow_features_test.cpp): the reference
// interpreter and script, the one-layer model and its random data, and
// parsing the script's lines.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "accelerate/trainer/trainer.h"
#include "support/process_runner.h"

namespace trainer_flow_test {

inline std::string flow_reference_python() {
  const char* python = std::getenv("ACCELERATE_REFERENCE_PYTHON");
  return python && *python && std::filesystem::exists(python) ? python : "";
}

#define REQUIRE_FLOW_REFERENCE()                                                             \
  if (trainer_flow_test::flow_reference_python().empty())                                    \
  GTEST_SKIP() << "no Python reference: set ACCELERATE_REFERENCE_PYTHON to the interpreter " \
                  "scripts/install-reference-python.sh prints (scripts/test.sh does)"

// Runs the script with `arguments`: its exit code and stderr.
inline std::pair<int, std::string> run_flow_reference(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), {flow_reference_python(), TRAINER_FLOW_SCRIPT});
  const auto result = accelerate::testing::run_program(
      arguments, {{"HF_HUB_OFFLINE", "1"}, {"CUDA_VISIBLE_DEVICES", ""}}, std::chrono::minutes(3));
  return {result.exit_code, result.err};
}

// 77: a reference venv installed before accelerate joined its requirements.
#define ASSERT_FLOW_REFERENCE_RAN(ran)             \
  if (ran.first == 77) GTEST_SKIP() << ran.second; \
  ASSERT_EQ(ran.first, 0) << ran.second

struct FlowNetImpl : torch::nn::Module {
  FlowNetImpl() : fc(register_module("fc", torch::nn::Linear(3, 1))) {}
  torch::nn::Linear fc;
};
TORCH_MODULE(FlowNet);

inline accelerate::TensorDataset flow_data(int64_t samples, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto x = at::randn({samples, 3}, generator);
  return accelerate::TensorDataset(x, x.cos().sum(1, true));
}

// The global steps of the training logs, evaluations and saves, as the
// script's Recorder callback notes them.
struct FlowSteps : accelerate::TrainerCallback {
  std::vector<int64_t> logs, evaluations, saves;
  void on_log(const accelerate::TrainerState& state, const accelerate::Metrics& logs_) override {
    if (logs_.count("loss")) logs.push_back(state.global_step);
  }
  void on_evaluate(const accelerate::TrainerState& state, const accelerate::Metrics&) override {
    evaluations.push_back(state.global_step);
  }
  void on_save(const accelerate::TrainerState& state, const std::string&) override {
    saves.push_back(state.global_step);
  }
};

inline accelerate::IntervalStrategy strategy(const std::string& name) {
  const auto parsed = accelerate::parse_interval_strategy(name);
  if (!parsed) throw std::runtime_error("unknown strategy " + name);
  return *parsed;
}

inline std::vector<int64_t> numbers(std::istringstream& fields) {
  std::vector<int64_t> out;
  int64_t value = 0;
  while (fields >> value) out.push_back(value);
  return out;
}

// What one case of ours gave: its steps, and (where the script lists them)
// the checkpoint folders with their files.
struct FlowRun {
  FlowSteps steps;
  std::string folders;
};

// Reads the script's output `file`: at each "case" line, our run of that
// case (run_case(line, a folder of its own under `dir`)); each "log",
// "evaluate", "save" and "folders" line after it is compared with ours.
// Returns the number of cases.
inline int expect_flows_as_reference(
    const std::string& file, const std::string& dir,
    const std::function<FlowRun(const std::string&, const std::string&)>& run_case) {
  std::ifstream in(file);
  std::string line, label;
  FlowRun ours;
  int cases = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "case") {
      label = line;
      ours = run_case(line, dir + "/run" + std::to_string(cases++));
    } else if (kind == "log") {
      EXPECT_EQ(ours.steps.logs, numbers(fields)) << label << ": training logs";
    } else if (kind == "evaluate") {
      EXPECT_EQ(ours.steps.evaluations, numbers(fields)) << label << ": evaluations";
    } else if (kind == "save") {
      EXPECT_EQ(ours.steps.saves, numbers(fields)) << label << ": saves";
    } else if (kind == "folders") {
      std::string theirs;
      std::getline(fields >> std::ws, theirs);
      EXPECT_EQ(ours.folders, theirs) << label << ": checkpoint folders and their files";
    }
  }
  return cases;
}

}  // namespace trainer_flow_test
