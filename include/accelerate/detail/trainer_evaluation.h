// Pieces of accelerate::Trainer's evaluation loop (trainer.h) that do not
// depend on the model or dataset types: concatenating batches of predictions
// whose lengths differ, and the mean evaluation loss. Programs use Trainer,
// not this.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace accelerate::detail {

// Hugging Face's padding_index for predictions and labels of different lengths.
constexpr int64_t kEvalPaddingIndex = -100;

// The batches stacked along the first dimension, as Hugging Face's
// nested_concat does: when their second dimension differs, each is padded at
// its end to the longest with `padding_index` (the dimensions beyond the
// second must agree). 1-d batches are concatenated as they are.
at::Tensor pad_and_concatenate(const std::vector<at::Tensor>& batches,
                               int64_t padding_index = kEvalPaddingIndex);

// The evaluation loss: the mean of one value per sample (its batch's mean
// loss). With the NaN/Inf filter (logging_nan_inf_filter), non-finite values
// are left out unless every value is non-finite, as in Hugging Face.
class EvaluationLoss {
 public:
  explicit EvaluationLoss(bool nan_inf_filter) : nan_inf_filter_(nan_inf_filter) {}
  // One value per sample, gathered over the processes.
  void add(const at::Tensor& per_sample);
  int64_t samples() const { return count_; }
  // nullopt before any sample.
  std::optional<double> mean() const;

 private:
  bool nan_inf_filter_;
  double sum_ = 0, finite_sum_ = 0;
  int64_t count_ = 0, finite_count_ = 0;
};

}  // namespace accelerate::detail
