// When the Trainer logs, evaluates and saves (logging_strategy,
// logging_first_step, the eval and save strategies, the last step and
// epochs cut short by max_steps), and how predict() pads predictions of
// varying length, against transformers' Trainer:
// tests/trainer/trainer_flow_reference.py runs each case under
// $ACCELERATE_REFERENCE_PYTHON and writes the steps of each event (or the
// predictions); the same settings run here must give the same. Without the
// interpreter the tests report themselves skipped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/trainer/trainer.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "trainer_flow_support.h"

namespace trainer_flow_test {

namespace fs = std::filesystem;
using accelerate::IntervalStrategy;
using accelerate::TrainerControl;
using accelerate::TrainerState;
using accelerate::TrainingArguments;

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

TEST(TrainerFlow, LogsEvaluatesAndSavesAtTransformersSteps) {
  REQUIRE_FLOW_REFERENCE();
  accelerate::testing::TempDir dir("trainer-flow");
  const std::string file = dir.path() + "/flow.txt";
  const auto ran = run_flow_reference({"flow", file});
  ASSERT_FLOW_REFERENCE_RAN(ran);
  const int cases = expect_flows_as_reference(
      file, dir.path(), [](const std::string& line, const std::string& folder) {
        return FlowRun{run_case(line, folder), ""};
      });
  EXPECT_EQ(cases, 6);  // as many as the script has
}

// ---- predict() of token-level outputs under dynamic padding ----

constexpr int64_t kTokens = 6, kTags = 3;
const std::vector<int64_t> kTagLengths = {1, 1, 1, 1, 1, 1, 1, 1, 3, 5,
                                          2, 1, 4, 2, 3, 2, 1, 2, 2, 3};

struct TokenTaggerImpl : torch::nn::Module {
  TokenTaggerImpl() : fc(register_module("fc", torch::nn::Linear(1, kTags))) {
    auto generator = at::detail::createCPUGenerator(29);
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) p.normal_(0.0, 0.5, generator);
  }
  torch::nn::Linear fc;
};
TORCH_MODULE(TokenTagger);

accelerate::TensorDataset tag_data() {
  const int64_t n = static_cast<int64_t>(kTagLengths.size());
  auto x = at::zeros({n, kTokens, 1});
  auto labels = at::full({n, kTokens}, -100, at::kLong);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < kTagLengths[i]; ++j) {
      x[i][j][0] = 0.1 * static_cast<double>(i + 1) + static_cast<double>(j);
      labels[i][j] = (i + j) % kTags;
    }
  }
  return accelerate::TensorDataset(x, labels);
}

// The same predict() as the script's (batches of 4 cut to their longest
// sample), plain and with an argmax, here: equal values, shapes and -100s.
TEST(TrainerFlow, PredictPadsVaryingLengthsAsTransformers) {
  REQUIRE_FLOW_REFERENCE();
  accelerate::testing::TempDir dir("trainer-flow");
  const auto data = tag_data();
  TokenTagger model;
  accelerate::save_safetensors(dir.path() + "/in.safetensors",
                               {{"weight", model->fc->weight.detach()},
                                {"bias", model->fc->bias.detach()},
                                {"x", data.data()},
                                {"labels", data.targets()}});
  const auto ran = run_flow_reference(
      {"padding", dir.path() + "/in.safetensors", dir.path() + "/out.safetensors"});
  ASSERT_FLOW_REFERENCE_RAN(ran);
  std::map<std::string, at::Tensor> theirs;
  for (auto& [name, tensor] : accelerate::load_safetensors(dir.path() + "/out.safetensors")) {
    theirs[name] = tensor;
  }
  std::map<std::string, accelerate::PredictionOutput> ours;
  const auto args = TrainingArguments()
                        .output_dir(dir.path())
                        .per_device_eval_batch_size(4)
                        .max_steps(1)
                        .save_strategy(IntervalStrategy::kNo);
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<accelerate::Communicator> c) {
    accelerate::Trainer<TokenTagger, accelerate::TensorDataset> trainer(
        model, args, data,
        [](TokenTagger& m, const accelerate::Example& b) {
          const int64_t longest = b.target.ne(-100).sum(1).max().item<int64_t>();
          const at::Tensor logits = m->fc(b.data.narrow(1, 0, longest));
          const at::Tensor labels = b.target.narrow(1, 0, longest);
          return accelerate::ModelOutput(torch::nn::functional::cross_entropy(
                                             logits.reshape({-1, kTags}), labels.reshape({-1})),
                                         logits, labels);
        },
        std::nullopt, {}, c);
    ours["plain"] = trainer.predict(data);
    trainer.preprocess_logits_for_metrics(
        [](const at::Tensor& logits, const at::Tensor&) { return logits.argmax(-1); });
    ours["argmax"] = trainer.predict(data);
  });
  for (const std::string name : {"plain", "argmax"}) {
    const at::Tensor& predictions = theirs.at(name + ".predictions");
    ASSERT_EQ(ours[name].predictions.sizes(), predictions.sizes()) << name;
    EXPECT_TRUE(
        torch::allclose(ours[name].predictions.to(predictions.dtype()), predictions, 1e-6, 1e-6))
        << name;
    EXPECT_TRUE(torch::equal(ours[name].label_ids, theirs.at(name + ".label_ids"))) << name;
  }
}

}  // namespace trainer_flow_test
