// Trainer::evaluate with compute_metrics and Trainer::predict: after real
// training of a tiny classifier, on 1 process and on 2 ranks (threads with
// real collectives) with an uneven last batch, the predictions are every
// evaluation sample once and in order, and accuracy and F1 equal a numpy
// computation (tests/trainer/metrics_reference.py) on the same predictions.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "accelerate/trainer/trainer.h"
#include "support/process_runner.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "trainer/tiny_mlp.h"

namespace trainer_eval_test {

using accelerate::Communicator;
using accelerate::TrainingArguments;

struct ClassifierImpl : accelerate::testing::TinyMlpImpl {
  ClassifierImpl() : TinyMlpImpl(4, 2, 23) {}
};
TORCH_MODULE(Classifier);

// Label 1 when the features sum above 0.3: learnable, not balanced.
accelerate::TensorDataset labelled(int64_t samples, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto x = at::randn({samples, 4}, generator);
  return accelerate::TensorDataset(x, (x.sum(1) > 0.3).to(at::kLong));
}

accelerate::ModelOutput classify(Classifier& model, const accelerate::Example& batch) {
  at::Tensor logits = model->forward(batch.data);
  return {torch::cross_entropy_loss(logits, batch.target), logits};
}

// The program's compute_metrics: accuracy and binary F1 of the argmax.
accelerate::Metrics accuracy_and_f1(const accelerate::EvalPrediction& p) {
  const at::Tensor predicted = p.predictions.dim() == 2 ? p.predictions.argmax(1) : p.predictions;
  const at::Tensor labels = p.label_ids;
  const double tp = (predicted.eq(1) & labels.eq(1)).sum().item<double>();
  const double precision = tp / std::max(1.0, predicted.eq(1).sum().item<double>());
  const double recall = tp / std::max(1.0, labels.eq(1).sum().item<double>());
  return {{"accuracy", predicted.eq(labels).to(at::kDouble).mean().item<double>()},
          {"f1", precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0}};
}

TrainingArguments args_in(const std::string& dir) {
  return TrainingArguments()
      .output_dir(dir)
      .per_device_train_batch_size(8)
      .per_device_eval_batch_size(4)
      .learning_rate(0.05)
      .max_steps(12)
      .logging_steps(100)
      .save_strategy(accelerate::IntervalStrategy::kNo)
      .seed(3);
}

struct Evaluated {
  accelerate::Metrics metrics;
  accelerate::PredictionOutput prediction;
  std::vector<at::Tensor> weights;  // after training, on rank 0
};

// Trains, evaluates on `eval` and predicts `test` on `world` ranks.
Evaluated train_and_evaluate(int world, const accelerate::TensorDataset& eval,
                             const accelerate::TensorDataset& test, bool argmax = false) {
  accelerate::testing::TempDir dir;
  Evaluated result;
  accelerate::testing::run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    Classifier model;
    accelerate::Trainer<Classifier, accelerate::TensorDataset> trainer(
        model, args_in(dir.path()), labelled(96, 1), classify, eval, {}, comm);
    trainer.compute_metrics(accuracy_and_f1);
    if (argmax) {
      trainer.preprocess_logits_for_metrics(
          [](const at::Tensor& logits, const at::Tensor&) { return logits.argmax(1); });
    }
    trainer.train();
    auto metrics = trainer.evaluate();
    auto prediction = trainer.predict(test);
    if (comm->rank() != 0) return;
    result.metrics = metrics;
    result.prediction = prediction;
    for (const auto& p : model->parameters()) result.weights.push_back(p.detach().clone());
  });
  return result;
}

// The trained model's logits for every sample, computed directly.
at::Tensor logits_of(const std::vector<at::Tensor>& weights, const at::Tensor& x) {
  Classifier model;
  torch::NoGradGuard no_grad;
  auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(weights[i]);
  return model->forward(x);
}

std::string reference_python() {
  const char* python = std::getenv("ACCELERATE_REFERENCE_PYTHON");
  return python && *python && std::filesystem::exists(python) ? python : "/usr/bin/python3";
}

// Accuracy, F1 and the count numpy computes from these logits and labels.
std::vector<double> python_metrics(const at::Tensor& logits, const at::Tensor& labels) {
  accelerate::testing::TempDir dir;
  const std::string path = dir.path() + "/predictions.txt";
  {
    std::ofstream out(path);
    out.precision(17);
    for (int64_t i = 0; i < logits.size(0); ++i) {
      for (int64_t j = 0; j < logits.size(1); ++j) out << logits[i][j].item<double>() << " ";
      out << labels[i].item<int64_t>() << "\n";
    }
  }
  const auto run = accelerate::testing::run_program(
      {reference_python(), TRAINER_METRICS_REFERENCE, path}, {}, std::chrono::minutes(1));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::istringstream in(run.out);
  std::vector<double> values(3, -1.0);
  in >> values[0] >> values[1] >> values[2];
  return values;
}

class EvaluationOn : public ::testing::TestWithParam<int> {};

TEST_P(EvaluationOn, MetricsEqualNumpysOnEverySampleOnce) {
  // 27 samples, 4 a process: the last batch is uneven on 1 and on 2 ranks.
  const auto eval = labelled(27, 9);
  const Evaluated result = train_and_evaluate(GetParam(), eval, eval);
  const at::Tensor expected = logits_of(result.weights, eval.data());
  const auto reference = python_metrics(expected, eval.targets());
  ASSERT_EQ(reference[2], 27.0);
  EXPECT_DOUBLE_EQ(result.metrics.at("eval_accuracy"), reference[0]);
  EXPECT_DOUBLE_EQ(result.metrics.at("eval_f1"), reference[1]);
  EXPECT_EQ(result.metrics.count("accuracy"), 0u) << "Hugging Face prefixes them";
  // Not a trivial classifier: it learnt something, and is not always right.
  EXPECT_GT(reference[0], 0.6);
  EXPECT_LT(reference[0], 1.0);
  // The loss is each batch's mean once per sample (Hugging Face's rule): exact
  // on 1 process; on 2 the last batch's mean also counts the samples that
  // even_batches repeated to fill it.
  EXPECT_NEAR(result.metrics.at("eval_loss"),
              torch::cross_entropy_loss(expected, eval.targets()).item<double>(),
              GetParam() == 1 ? 1e-6 : 1e-2);
}

TEST_P(EvaluationOn, PredictReturnsEveryRowInOrder) {
  const auto eval = labelled(27, 9);
  const auto test = labelled(13, 4);  // 13 = 4 + 4 + 4 + 1: uneven on 2 ranks
  const Evaluated result = train_and_evaluate(GetParam(), eval, test);
  const auto& p = result.prediction;
  ASSERT_EQ(p.predictions.size(0), 13);
  EXPECT_TRUE(torch::allclose(p.predictions, logits_of(result.weights, test.data()), 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(p.label_ids, test.targets()));
  const auto reference = python_metrics(p.predictions, p.label_ids);
  EXPECT_DOUBLE_EQ(p.metrics.at("test_accuracy"), reference[0]);
  EXPECT_DOUBLE_EQ(p.metrics.at("test_f1"), reference[1]);
  EXPECT_TRUE(p.metrics.count("test_loss"));
  EXPECT_EQ(p.metrics.count("eval_accuracy"), 0u);
}

INSTANTIATE_TEST_SUITE_P(Processes, EvaluationOn, ::testing::Values(1, 2));

TEST(TrainerEvaluation, PreprocessLogitsForMetricsReplacesThePredictions) {
  const auto eval = labelled(27, 9);
  const Evaluated result = train_and_evaluate(2, eval, eval, /*argmax=*/true);
  const at::Tensor logits = logits_of(result.weights, eval.data());
  EXPECT_TRUE(torch::equal(result.prediction.predictions, logits.argmax(1)));
  EXPECT_DOUBLE_EQ(result.metrics.at("eval_accuracy"), python_metrics(logits, eval.targets())[0]);
}

TEST(TrainerEvaluation, AFunctionReturningOnlyTheLossReportsTheLossOnly) {
  accelerate::testing::TempDir dir;
  const auto eval = labelled(10, 9);
  Classifier model;
  accelerate::Trainer<Classifier, accelerate::TensorDataset> trainer(
      model, args_in(dir.path()), labelled(32, 1),
      [](Classifier& m, const accelerate::Example& batch) {
        return torch::cross_entropy_loss(m->forward(batch.data), batch.target);
      },
      eval);
  trainer.compute_metrics(accuracy_and_f1);
  const auto metrics = trainer.evaluate();
  EXPECT_TRUE(metrics.count("eval_loss"));
  EXPECT_EQ(metrics.count("eval_accuracy"), 0u);
  EXPECT_FALSE(trainer.predict(eval).predictions.defined());
}

}  // namespace trainer_eval_test
