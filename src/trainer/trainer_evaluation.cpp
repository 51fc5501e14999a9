#include "accelerate/detail/trainer_evaluation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "accelerate/common/errors.h"

namespace accelerate::detail {

at::Tensor pad_and_concatenate(const std::vector<at::Tensor>& batches, int64_t padding_index) {
  if (batches.empty()) return {};
  const at::Tensor& first = batches.front();
  if (first.dim() < 2) return at::cat(batches);
  int64_t rows = 0, longest = 0;
  for (const auto& batch : batches) {
    if (batch.dim() != first.dim() || batch.sizes().slice(2) != first.sizes().slice(2)) {
      throw Error(
          "Trainer: batches of predictions or labels differ beyond their second dimension (" +
          std::to_string(batch.dim()) + "-d " + c10::str(batch.sizes()) + " after " +
          c10::str(first.sizes()) + "); only the second may vary");
    }
    rows += batch.size(0);
    longest = std::max(longest, batch.size(1));
  }
  const bool same_length = std::all_of(batches.begin(), batches.end(),
                                       [&](const at::Tensor& b) { return b.size(1) == longest; });
  if (same_length) return at::cat(batches);
  auto sizes = first.sizes().vec();
  sizes[0] = rows;
  sizes[1] = longest;
  at::Tensor result = first.new_full(sizes, padding_index);
  int64_t row = 0;
  for (const auto& batch : batches) {
    result.narrow(0, row, batch.size(0)).narrow(1, 0, batch.size(1)).copy_(batch);
    row += batch.size(0);
  }
  return result;
}

void EvaluationLoss::add(const at::Tensor& per_sample) {
  const at::Tensor values = per_sample.detach().to(at::kDouble);
  const at::Tensor finite = values.isfinite();
  // One transfer for the four numbers.
  const at::Tensor summary =
      at::stack(
          {values.sum(), at::scalar_tensor(static_cast<double>(values.numel()), values.options()),
           at::where(finite, values, at::zeros_like(values)).sum(), finite.sum().to(at::kDouble)})
          .cpu();
  const double* s = summary.data_ptr<double>();
  sum_ += s[0];
  count_ += static_cast<int64_t>(s[1]);
  finite_sum_ += s[2];
  finite_count_ += static_cast<int64_t>(s[3]);
}

std::optional<double> EvaluationLoss::mean() const {
  if (count_ == 0) return std::nullopt;
  if (nan_inf_filter_ && finite_count_ > 0) return finite_sum_ / static_cast<double>(finite_count_);
  return sum_ / static_cast<double>(count_);
}

}  // namespace accelerate::detail
