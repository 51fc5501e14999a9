// Trainer::predict and evaluate beyond fixed shapes, and the events and
// filters around them: on_predict and on_prediction_step; token-level
// predictions whose length varies per batch (dynamic padding), padded with
// -100 across the processes and across the batches as Hugging Face's
// evaluation loop does; logging_nan_inf_filter in the logged training loss
// and in the evaluation loss.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "accelerate/trainer/trainer.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "trainer/tiny_mlp.h"

namespace trainer_predict_test {

using accelerate::Communicator;
using accelerate::TrainerControl;
using accelerate::TrainerState;
using accelerate::TrainingArguments;

constexpr int64_t kWidth = 6, kClasses = 3;
// Tokens per sample: the first 8 are short, so the samples that even_batches
// repeats to fill the last batch (taken from the start) set no length.
const std::vector<int64_t> kLengths = {1, 1, 1, 1, 1, 1, 1, 1, 3, 5, 2, 1, 4, 2, 3, 2, 1, 2, 2, 3};

// A per-token classifier: Linear(1, 3) over [batch, tokens, 1].
struct TaggerImpl : torch::nn::Module {
  TaggerImpl() : fc(register_module("fc", torch::nn::Linear(1, kClasses))) {
    auto generator = at::detail::createCPUGenerator(17);
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) p.normal_(0.0, 0.5, generator);
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(x); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Tagger);

// Tokens past a sample's length are 0 with label -100 (padding).
accelerate::TensorDataset tokens() {
  const int64_t n = static_cast<int64_t>(kLengths.size());
  auto x = at::zeros({n, kWidth, 1});
  auto labels = at::full({n, kWidth}, -100, at::kLong);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < kLengths[i]; ++j) {
      x[i][j][0] = 0.1 * static_cast<double>(i + 1) + static_cast<double>(j);
      labels[i][j] = (i + j) % kClasses;
    }
  }
  return accelerate::TensorDataset(x, labels);
}

// Dynamic padding: each batch is cut to its longest sample.
accelerate::ModelOutput tag(Tagger& model, const accelerate::Example& batch) {
  const int64_t longest = batch.target.ne(-100).sum(1).max().item<int64_t>();
  const at::Tensor logits = model->forward(batch.data).narrow(1, 0, longest);
  const at::Tensor labels = batch.target.narrow(1, 0, longest);
  const at::Tensor loss =
      torch::nn::functional::cross_entropy(logits.reshape({-1, kClasses}), labels.reshape({-1}),
                                           torch::nn::functional::CrossEntropyFuncOptions());
  return {loss, logits, labels};
}

TrainingArguments predict_args(const std::string& dir) {
  return TrainingArguments()
      .output_dir(dir)
      .per_device_train_batch_size(4)
      .per_device_eval_batch_size(4)
      .max_steps(1)
      .save_strategy(accelerate::IntervalStrategy::kNo);
}

struct PredictEvents : accelerate::TrainerCallback {
  int prediction_steps = 0, predicts = 0;
  accelerate::Metrics predict_metrics;
  void on_prediction_step(const TrainingArguments&, const TrainerState&, TrainerControl&) override {
    ++prediction_steps;
  }
  void on_predict(const TrainingArguments&, const TrainerState&, TrainerControl&,
                  const accelerate::Metrics& metrics) override {
    ++predicts;
    predict_metrics = metrics;
  }
};

struct Predicted {
  accelerate::PredictionOutput plain, argmax;
  int prediction_steps_in_evaluate = 0, prediction_steps_in_predict = 0, predicts = 0;
  accelerate::Metrics returned, seen;
};

// predict() on `world` ranks, untrained, without and with an argmax.
Predicted predict_on(int world) {
  accelerate::testing::TempDir dir;
  Predicted result;
  accelerate::testing::run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    Tagger model;
    accelerate::Trainer<Tagger, accelerate::TensorDataset> trainer(
        model, predict_args(dir.path()), tokens(), tag, tokens(), {}, comm);
    auto events = std::make_shared<PredictEvents>();
    trainer.add_callback(events);
    trainer.evaluate();
    const int in_evaluate = events->prediction_steps;
    auto plain = trainer.predict(tokens());
    const int in_predict = events->prediction_steps - in_evaluate;
    trainer.preprocess_logits_for_metrics(
        [](const at::Tensor& logits, const at::Tensor&) { return logits.argmax(-1); });
    auto argmax = trainer.predict(tokens());
    if (comm->rank() != 0) return;
    result.plain = plain;
    result.argmax = argmax;
    result.prediction_steps_in_evaluate = in_evaluate;
    result.prediction_steps_in_predict = in_predict;
    result.predicts = events->predicts;
    result.returned = argmax.metrics;
    result.seen = events->predict_metrics;
  });
  return result;
}

// What Hugging Face's loop makes of it: a sample's tokens up to its batch's
// longest hold the model's logits; the argmax is taken after padding across
// the processes, so tokens up to the longest of the step's batches on all
// `world` processes have argmax 0 (of -100s); the rest is -100.
void expect_padded_like_transformers(const Predicted& p, int world) {
  const int64_t n = static_cast<int64_t>(kLengths.size()), batch = 4;
  const auto data = tokens();
  Tagger model;
  const at::Tensor logits = model->forward(data.data()).detach();
  const auto longest_of = [&](int64_t first, int64_t count) {
    int64_t longest = 0;
    for (int64_t i = first; i < std::min(n, first + count); ++i)
      longest = std::max(longest, kLengths[i]);
    return longest;
  };
  const int64_t width = *std::max_element(kLengths.begin(), kLengths.end());
  at::Tensor want = at::full({n, width, kClasses}, -100.0);
  at::Tensor want_argmax = at::full({n, width}, -100, at::kLong);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t in_batch = longest_of(i / batch * batch, batch);
    const int64_t in_step = longest_of(i / (batch * world) * batch * world, batch * world);
    want[i].narrow(0, 0, in_batch).copy_(logits[i].narrow(0, 0, in_batch));
    want_argmax[i].narrow(0, 0, in_step).fill_(0);
    want_argmax[i].narrow(0, 0, in_batch).copy_(logits[i].narrow(0, 0, in_batch).argmax(-1));
  }
  ASSERT_TRUE(p.plain.predictions.defined());
  EXPECT_EQ(p.plain.predictions.sizes(), want.sizes());
  EXPECT_TRUE(torch::allclose(p.plain.predictions, want, 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(p.plain.label_ids, data.targets().narrow(1, 0, width)));
  EXPECT_TRUE(torch::equal(p.argmax.predictions, want_argmax)) << p.argmax.predictions;
}

TEST(TrainerPredict, VariableLengthPredictionsArePaddedWithMinus100OnOneProcess) {
  expect_padded_like_transformers(predict_on(1), 1);
}

TEST(TrainerPredict, VariableLengthPredictionsArePaddedWithMinus100OnTwoRanks) {
  expect_padded_like_transformers(predict_on(2), 2);
}

TEST(TrainerPredict, PredictFiresOnPredictAndEachBatchOnPredictionStep) {
  const Predicted p = predict_on(2);
  // 20 samples, 4 a batch, 2 ranks: 3 batches on each (the last one filled).
  EXPECT_EQ(p.prediction_steps_in_evaluate, 3);
  EXPECT_EQ(p.prediction_steps_in_predict, 3);
  EXPECT_EQ(p.predicts, 2);  // evaluate() does not fire it
  EXPECT_EQ(p.seen, p.returned);
  EXPECT_TRUE(p.seen.count("test_loss"));
}

// ---- logging_nan_inf_filter ----

struct RegressorImpl : accelerate::testing::TinyMlpImpl {
  RegressorImpl() : TinyMlpImpl(3, 1, 41) {}
};
TORCH_MODULE(Regressor);

accelerate::TensorDataset regression_data(int64_t samples, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto x = at::randn({samples, 3}, generator);
  return accelerate::TensorDataset(x, x.sin().sum(1, true));
}

struct NanRun {
  std::vector<double> train_losses, eval_losses;  // each call's finite loss, in order
  std::vector<accelerate::Metrics> logs;          // the training logs
  double eval_loss = 0;
};

// Training call 4 (step 2's second micro-batch) and evaluation batch 2 have
// a NaN loss: NaN added as a constant, so the gradients stay finite.
NanRun run_with_a_nan(bool filter) {
  accelerate::testing::TempDir dir;
  NanRun run;
  const auto args = TrainingArguments()
                        .output_dir(dir.path())
                        .per_device_train_batch_size(4)
                        .per_device_eval_batch_size(4)
                        .gradient_accumulation_steps(2)
                        .max_steps(3)
                        .logging_steps(1)
                        .learning_rate(0.01)
                        .save_strategy(accelerate::IntervalStrategy::kNo)
                        .logging_nan_inf_filter(filter);
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    Regressor model;
    accelerate::Trainer<Regressor, accelerate::TensorDataset> trainer(
        model, args, regression_data(24, 1),
        [&run](Regressor& m, const accelerate::Example& b) {
          at::Tensor loss = torch::mse_loss(m->forward(b.data), b.target);
          auto& seen = m->is_training() ? run.train_losses : run.eval_losses;
          seen.push_back(loss.item<double>());
          const bool poisoned = m->is_training() ? seen.size() == 4 : seen.size() == 2;
          return poisoned ? loss + at::full({}, std::nan("")) : loss;
        },
        regression_data(12, 2), {}, comm);
    trainer.train();
    for (const auto& log : trainer.state().log_history) {
      if (log.count("loss")) run.logs.push_back(log);
    }
    run.eval_loss = trainer.evaluate().at("eval_loss");
  });
  return run;
}

TEST(TrainerNanInfFilter, ANanMicroBatchLogsTheMeanSinceTheLastLog) {
  const NanRun run = run_with_a_nan(/*filter=*/true);
  ASSERT_EQ(run.train_losses.size(), 6u);
  ASSERT_EQ(run.logs.size(), 3u);
  const auto& l = run.train_losses;
  EXPECT_NEAR(run.logs[0].at("loss"), (l[0] + l[1]) / 2, 1e-12);
  // Hugging Face's substitute: what was summed since the last log (l[2] / 2)
  // over 1 + the steps since it (0 before this step ends): the step logs l[2].
  EXPECT_NEAR(run.logs[1].at("loss"), l[2], 1e-12);
  EXPECT_NEAR(run.logs[2].at("loss"), (l[4] + l[5]) / 2, 1e-12);
  // The NaN batch (the second of three of 4 samples) is left out.
  ASSERT_EQ(run.eval_losses.size(), 3u);
  EXPECT_NEAR(run.eval_loss, (run.eval_losses[0] + run.eval_losses[2]) / 2, 1e-12);
}

TEST(TrainerNanInfFilter, WithoutTheFilterTheNanIsLogged) {
  const NanRun run = run_with_a_nan(/*filter=*/false);
  ASSERT_EQ(run.logs.size(), 3u);
  EXPECT_TRUE(std::isnan(run.logs[1].at("loss")));
  EXPECT_TRUE(std::isfinite(run.logs[2].at("loss")));  // training itself went on unharmed
  EXPECT_TRUE(std::isnan(run.eval_loss));
}

}  // namespace trainer_predict_test
