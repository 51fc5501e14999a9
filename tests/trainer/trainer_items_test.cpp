// Trainer::count_items_with (transformers' num_items_in_batch): sequences of
// different lengths (labels -100 past each one's end), accumulated over 2
// micro-batches on 1 and 2 processes, train as the one big batch of them on
// one process, within fp32 rounding; the usual mean-per-micro-batch loss
// does not.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accelerate/trainer/trainer.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace trainer_items_test {

using accelerate::Communicator;
using accelerate::TrainingArguments;

constexpr int64_t kVocab = 11, kLength = 6;

struct TokenNetImpl : torch::nn::Module {
  TokenNetImpl()
      : embed(register_module("embed", torch::nn::Embedding(kVocab, 8))),
        head(register_module("head", torch::nn::Linear(8, kVocab))) {
    auto generator = at::detail::createCPUGenerator(41);
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) p.normal_(0.0, 0.5, generator);
  }
  torch::Tensor forward(const torch::Tensor& tokens) { return head(torch::tanh(embed(tokens))); }
  torch::nn::Embedding embed;
  torch::nn::Linear head;
};
TORCH_MODULE(TokenNet);

using TokenTrainer = accelerate::Trainer<TokenNet, accelerate::TensorDataset>;

// 32 sequences whose lengths run from 1 to kLength; labels past the length are -100.
accelerate::TensorDataset sequences() {
  auto generator = at::detail::createCPUGenerator(13);
  const int64_t n = 32;
  at::Tensor tokens = at::randint(kVocab, {n, kLength}, generator, at::kLong);
  at::Tensor labels = at::randint(kVocab, {n, kLength}, generator, at::kLong);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t length = 1 + (i * 5) % kLength;
    labels[i].narrow(0, length, kLength - length).fill_(-100);
  }
  return accelerate::TensorDataset(tokens, labels);
}

at::Tensor token_loss(TokenNet& model, const accelerate::Example& batch,
                      at::Reduction::Reduction reduction) {
  const at::Tensor logits = model->forward(batch.data);
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, kVocab}), batch.target.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(
          reduction == at::Reduction::Sum
              ? torch::nn::functional::CrossEntropyFuncOptions::reduction_t(torch::kSum)
              : torch::nn::functional::CrossEntropyFuncOptions::reduction_t(torch::kMean)));
}

int64_t valid_labels(const accelerate::Example& batch) {
  return (batch.target != -100).sum().item<int64_t>();
}

TrainingArguments items_args(const std::string& dir, int64_t batch, int accumulation) {
  return TrainingArguments()
      .output_dir(dir)
      .per_device_train_batch_size(batch)
      .gradient_accumulation_steps(accumulation)
      .optim(accelerate::OptimizerName::kSgd)
      .learning_rate(0.5)
      .lr_scheduler_type(accelerate::SchedulerType::kConstant)
      .max_grad_norm(0)
      .max_steps(4)
      .logging_steps(1)
      .save_strategy(accelerate::IntervalStrategy::kNo)
      .disable_tqdm(true)
      .seed(7);
}

struct ItemsRun {
  std::vector<at::Tensor> weights;
  std::vector<double> losses;  // logged per step
};

ItemsRun run_items(int processes, int64_t batch, int accumulation, bool count_items) {
  accelerate::testing::TempDir dir;
  ItemsRun result;
  accelerate::testing::run_rank_communicators(processes, [&](std::shared_ptr<Communicator> comm) {
    TokenNet model;
    const auto reduction = count_items ? at::Reduction::Sum : at::Reduction::Mean;
    TokenTrainer trainer(
        model, items_args(dir.path(), batch, accumulation), sequences(),
        [reduction](TokenNet& m, const accelerate::Example& b) {
          return token_loss(m, b, reduction);
        },
        std::nullopt, {}, comm);
    if (count_items) trainer.count_items_with(valid_labels);
    trainer.train();
    if (comm->rank() != 0) return;
    for (const auto& p : model->parameters()) result.weights.push_back(p.detach().clone());
    for (const auto& log : trainer.state().log_history) {
      if (log.count("loss")) result.losses.push_back(log.at("loss"));
    }
  });
  return result;
}

double largest_gap(const ItemsRun& a, const ItemsRun& b) {
  double gap = 0;
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    gap = std::max(gap, (a.weights[i] - b.weights[i]).abs().max().item<double>());
  }
  return gap;
}

TEST(TrainerItems, AccumulatedVariableLengthsTrainAsTheOneBigBatch) {
  // Each optimizer step sees the same 8 sequences in every run.
  const ItemsRun big = run_items(1, 8, 1, /*count_items=*/true);
  const ItemsRun one_process = run_items(1, 4, 2, /*count_items=*/true);
  const ItemsRun two_processes = run_items(2, 2, 2, /*count_items=*/true);
  const ItemsRun mean_per_batch = run_items(2, 2, 2, /*count_items=*/false);
  ASSERT_EQ(big.weights.size(), one_process.weights.size());
  const double gap1 = largest_gap(big, one_process), gap2 = largest_gap(big, two_processes);
  std::cout << "[ items ] largest weight gap to the big batch: 1 process " << gap1
            << ", 2 processes " << gap2 << ", mean per micro-batch "
            << largest_gap(big, mean_per_batch) << "\n";
  EXPECT_LT(gap1, 1e-5);
  EXPECT_LT(gap2, 1e-5);
  EXPECT_GT(largest_gap(big, mean_per_batch), 1e-3) << "the lengths should matter";
  // The logged loss is the mean per item over the window, as the big batch's.
  ASSERT_EQ(big.losses.size(), 4u);
  ASSERT_EQ(two_processes.losses.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(two_processes.losses[i], big.losses[i], 1e-5) << "step " << i + 1;
    EXPECT_NEAR(one_process.losses[i], big.losses[i], 1e-5) << "step " << i + 1;
  }
}

}  // namespace trainer_items_test
