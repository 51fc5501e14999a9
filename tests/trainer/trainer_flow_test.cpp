// When the Trainer logs, evaluates and saves (logging_strategy,
// logging_first_step, the eval and save strategies, the last step and
// epochs cut short by max_steps) against transformers' Trainer:
// tests/trainer/trainer_flow_reference.py runs each case under
// $ACCELERATE_REFERENCE_PYTHON and writes the steps of each event; the same
// settings run here must give the same steps. Without the interpreter the
// test reports itself skipped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "accelerate/trainer.h"
#include "support/process_runner.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace trainer_flow_test {

namespace fs = std::filesystem;
using accelerate::IntervalStrategy;
using accelerate::TrainerControl;
using accelerate::TrainerState;
using accelerate::TrainingArguments;

std::string flow_reference_python() {
  const char* python = std::getenv("ACCELERATE_REFERENCE_PYTHON");
  return python && *python && fs::exists(python) ? python : "";
}

struct FlowNetImpl : torch::nn::Module {
  FlowNetImpl() : fc(register_module("fc", torch::nn::Linear(3, 1))) {}
  torch::nn::Linear fc;
};
TORCH_MODULE(FlowNet);

accelerate::TensorDataset flow_data(int64_t samples, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto x = at::randn({samples, 3}, generator);
  return accelerate::TensorDataset(x, x.cos().sum(1, true));
}

struct FlowSteps : accelerate::TrainerCallback {
  std::vector<int64_t> logs, evaluations, saves;
  void on_log(const TrainerState& state, const accelerate::Metrics& logs_) override {
    if (logs_.count("loss")) logs.push_back(state.global_step);
  }
  void on_evaluate(const TrainerState& state, const accelerate::Metrics&) override {
    evaluations.push_back(state.global_step);
  }
  void on_save(const TrainerState& state, const std::string&) override {
    saves.push_back(state.global_step);
  }
};

IntervalStrategy strategy(const std::string& name) {
  const auto parsed = accelerate::parse_interval_strategy(name);
  if (!parsed) throw std::runtime_error("unknown strategy " + name);
  return *parsed;
}

// One case line of the script: the same settings, trained here on 1 rank.
FlowSteps run_case(const std::string& line, const std::string& dir) {
  std::istringstream fields(line);
  std::string kind, logging, eval, save;
  int64_t samples = 0, batch = 0, max_steps = 0, logging_steps = 0, eval_steps = 0, save_steps = 0;
  int accumulation = 0, first = 0;
  double epochs = 0;
  fields >> kind >> samples >> batch >> accumulation >> max_steps >> epochs >> logging >>
      logging_steps >> first >> eval >> eval_steps >> save >> save_steps;
  auto args = TrainingArguments()
                  .output_dir(dir)
                  .per_device_train_batch_size(batch)
                  .per_device_eval_batch_size(batch)
                  .gradient_accumulation_steps(accumulation)
                  .max_steps(max_steps)
                  .num_train_epochs(epochs)
                  .logging_strategy(strategy(logging))
                  .logging_steps(logging_steps)
                  .logging_first_step(first != 0)
                  .eval_strategy(strategy(eval))
                  .save_strategy(strategy(save))
                  .save_steps(save_steps)
                  .learning_rate(0.01)
                  .seed(1);
  if (eval_steps > 0) args.eval_steps(eval_steps);
  FlowSteps steps;
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<accelerate::Communicator> c) {
    FlowNet model;
    accelerate::Trainer<FlowNet, accelerate::TensorDataset> trainer(
        model, args, flow_data(samples, 1),
        [](FlowNet& m, const accelerate::Example& b) {
          return torch::mse_loss(m->fc(b.data), b.target);
        },
        flow_data(8, 2), {}, c);
    auto recorder = std::make_shared<FlowSteps>();
    trainer.add_callback(recorder);
    trainer.train();
    steps = *recorder;
  });
  return steps;
}

std::vector<int64_t> numbers(std::istringstream& fields) {
  std::vector<int64_t> out;
  int64_t value = 0;
  while (fields >> value) out.push_back(value);
  return out;
}

TEST(TrainerFlow, LogsEvaluatesAndSavesAtTransformersSteps) {
  if (flow_reference_python().empty()) {
    GTEST_SKIP() << "no Python reference: set ACCELERATE_REFERENCE_PYTHON to the interpreter "
                    "scripts/install-reference-python.sh prints (scripts/test.sh does)";
  }
  accelerate::testing::TempDir dir("trainer-flow");
  const std::string file = dir.path() + "/flow.txt";
  const auto result = accelerate::testing::run_program(
      {flow_reference_python(), TRAINER_FLOW_SCRIPT, file},
      {{"HF_HUB_OFFLINE", "1"}, {"CUDA_VISIBLE_DEVICES", ""}}, std::chrono::minutes(3));
  // 77: a reference venv installed before accelerate joined its requirements.
  if (result.exit_code == 77) GTEST_SKIP() << result.err;
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::ifstream in(file);
  std::string line, label;
  FlowSteps ours;
  int cases = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "case") {
      label = line;
      ours = run_case(line, dir.path() + "/run" + std::to_string(cases++));
    } else if (kind == "log") {
      EXPECT_EQ(ours.logs, numbers(fields)) << label << ": training logs";
    } else if (kind == "evaluate") {
      EXPECT_EQ(ours.evaluations, numbers(fields)) << label << ": evaluations";
    } else if (kind == "save") {
      EXPECT_EQ(ours.saves, numbers(fields)) << label << ": saves";
    }
  }
  EXPECT_EQ(cases, 6);  // as many as the script has
}

}  // namespace trainer_flow_test
