// What the Trainer's model function returns for a batch, and what its
// evaluation hands to compute_metrics and returns from predict (Hugging
// Face's ModelOutput, EvalPrediction and PredictionOutput).
//
//   [](Classifier& model, const accelerate::Example& batch) {
//     at::Tensor logits = model->forward(batch.data);
//     return accelerate::ModelOutput(torch::cross_entropy_loss(logits, batch.target), logits);
//   }
//
// A function that returns only the loss (an at::Tensor) still fits: the
// Trainer then has no predictions, and evaluation reports the loss only.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <utility>

#include "accelerate/trainer/trainer_callback.h"

namespace accelerate {

struct ModelOutput {
  ModelOutput() = default;
  // Implicit, so that functions returning the loss alone still fit.
  ModelOutput(at::Tensor loss) : loss(std::move(loss)) {}  // NOLINT(google-explicit-constructor)
  ModelOutput(at::Tensor loss, at::Tensor logits, at::Tensor labels = {})
      : loss(std::move(loss)), logits(std::move(logits)), labels(std::move(labels)) {}

  at::Tensor loss;    // the batch's mean loss (training needs it)
  at::Tensor logits;  // one row per sample: the predictions (optional)
  at::Tensor labels;  // one row per sample; default: the batch's target (optional)
};

// Every evaluation sample once, in the dataset's order, gathered over the
// processes (gather_for_metrics): rows of predictions and of label_ids.
struct EvalPrediction {
  at::Tensor predictions;  // the logits, or what preprocess_logits_for_metrics made of them
  at::Tensor label_ids;    // undefined when the batches have no labels
};

// Trainer::predict's result: metrics are prefixed "test_".
struct PredictionOutput {
  at::Tensor predictions;
  at::Tensor label_ids;
  Metrics metrics;
};

// compute_metrics: names without the prefix ({"accuracy": 0.9}); the
// Trainer adds "eval_" (evaluate) or "test_" (predict) as Hugging Face does.
using ComputeMetrics = std::function<Metrics(const EvalPrediction&)>;
// preprocess_logits_for_metrics(logits, labels): what to keep of each batch's
// logits (e.g. their argmax), so that evaluation holds less.
using PreprocessLogits = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

}  // namespace accelerate
