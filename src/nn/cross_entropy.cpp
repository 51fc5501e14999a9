#include "accelerate/nn/cross_entropy.h"
#include "compat/parallel_ranges.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "nn/cross_entropy_kernels.h"
#include "nn/kernel_tensors.h"

namespace accelerate {
namespace {

// Logits per task of compat::parallel_ranges: a few vocabulary-sized rows.
constexpr int64_t kGrainElements = 1 << 15;

void check_inputs(const at::Tensor& logits, const at::Tensor& targets) {
  if (logits.dim() != 2 || targets.dim() != 1 || targets.size(0) != logits.size(0)) {
    throw Error("cross_entropy expects logits [rows, classes] and targets [rows], got " +
                c10::str(logits.sizes()) + " and " + c10::str(targets.sizes()));
  }
  if (logits.size(1) == 0) throw Error("cross_entropy: logits have no classes");
  if (at::isFloatingType(targets.scalar_type()) || targets.scalar_type() == at::kBool) {
    throw Error(std::string("cross_entropy expects integer class targets, got ") +
                c10::toString(targets.scalar_type()));
  }
}

// The number of rows that count (target != ignore_index), after checking
// that each of their targets is a class: one pass over the targets for both.
int64_t counted_rows(const at::Tensor& targets, int64_t classes, int64_t ignore_index) {
  const at::Tensor kept = targets.ne(ignore_index);
  const at::Tensor bad = kept.logical_and(targets.lt(0).logical_or(targets.ge(classes)));
  if (bad.any().item<bool>()) {
    const int64_t first = targets.masked_select(bad)[0].item<int64_t>();
    throw Error("cross_entropy: target " + std::to_string(first) + " is outside [0, " +
                std::to_string(classes) + ") and is not ignore_index " +
                std::to_string(ignore_index));
  }
  return kept.sum().item<int64_t>();
}

int64_t grain_rows(int64_t classes) { return std::max<int64_t>(1, kGrainElements / classes); }

// The forward pass keeps the logits (the caller's tensor, no copy), the
// targets and one float per row; LibTorch's keeps a float log-softmax of
// the whole [rows, classes].
struct FusedCrossEntropy : torch::autograd::Function<FusedCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits_in,
                            const at::Tensor& targets_in, int64_t ignore_index, int64_t reduction,
                            int64_t counted) {
    // Named in profiler traces (an autograd Function's forward is not an op).
    RECORD_FUNCTION("accelerate::cross_entropy", std::vector<c10::IValue>({logits_in}));
    const at::Tensor logits = logits_in.contiguous();
    const at::Tensor targets = targets_in.to(at::kLong).contiguous();
    const int64_t rows = logits.size(0), classes = logits.size(1);
    at::Tensor lse = at::empty({rows}, logits.options().dtype(at::kFloat));
    at::Tensor row_loss = at::empty({rows}, logits.options().dtype(at::kFloat));
    compat::parallel_ranges(rows, grain_rows(classes), [&](int64_t begin, int64_t end) {
      const int64_t* t = targets.data_ptr<int64_t>() + begin;
      float* l = lse.data_ptr<float>() + begin;
      float* out = row_loss.data_ptr<float>() + begin;
      if (logits.scalar_type() == at::kFloat) {
        detail::cross_entropy_forward(logits.data_ptr<float>() + begin * classes, end - begin,
                                      classes, t, ignore_index, l, out);
      } else {
        detail::cross_entropy_forward(detail::bf16_bits(logits) + begin * classes, end - begin,
                                      classes, t, ignore_index, l, out);
      }
    });
    ctx->save_for_backward({logits, targets, lse});
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["reduction"] = reduction;
    ctx->saved_data["counted"] = counted;
    switch (static_cast<LossReduction>(reduction)) {
      case LossReduction::kMean:
        return row_loss.sum() / static_cast<double>(counted);  // 0 / 0 = NaN, as LibTorch
      case LossReduction::kSum:
        return row_loss.sum();
      case LossReduction::kNone:
        return row_loss;
    }
    return row_loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2];
    const int64_t ignore_index = ctx->saved_data["ignore_index"].toInt();
    const auto reduction = static_cast<LossReduction>(ctx->saved_data["reduction"].toInt());
    const int64_t rows = logits.size(0), classes = logits.size(1);
    at::Tensor row_scale = grads[0].to(at::kFloat);
    if (reduction == LossReduction::kMean) {
      row_scale = row_scale / static_cast<double>(ctx->saved_data["counted"].toInt());
    }
    row_scale = row_scale.expand({rows}).contiguous();
    at::Tensor grad = at::empty_like(logits);
    compat::parallel_ranges(rows, grain_rows(classes), [&](int64_t begin, int64_t end) {
      const int64_t* t = targets.data_ptr<int64_t>() + begin;
      const float* l = lse.data_ptr<float>() + begin;
      const float* s = row_scale.data_ptr<float>() + begin;
      if (logits.scalar_type() == at::kFloat) {
        detail::cross_entropy_backward(logits.data_ptr<float>() + begin * classes, end - begin,
                                       classes, t, ignore_index, l, s,
                                       grad.data_ptr<float>() + begin * classes);
      } else {
        detail::cross_entropy_backward(detail::bf16_bits(logits) + begin * classes, end - begin,
                                       classes, t, ignore_index, l, s,
                                       detail::bf16_bits(grad) + begin * classes);
      }
    });
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

int64_t libtorch_reduction(LossReduction reduction) {
  switch (reduction) {
    case LossReduction::kMean:
      return at::Reduction::Mean;
    case LossReduction::kSum:
      return at::Reduction::Sum;
    case LossReduction::kNone:
      return at::Reduction::None;
  }
  return at::Reduction::Mean;
}

}  // namespace

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                         CrossEntropyOptions options) {
  check_inputs(logits, targets);
  const int64_t counted = counted_rows(targets, logits.size(1), options.ignore_index());
  if (!detail::fused_kernel_takes(logits)) {
    const bool narrow = logits.scalar_type() == at::kBFloat16 || logits.scalar_type() == at::kHalf;
    const at::Tensor wide = narrow ? logits.to(at::kFloat) : logits;
    return at::cross_entropy_loss(wide, targets.to(at::kLong), c10::nullopt,
                                  libtorch_reduction(options.reduction()), options.ignore_index());
  }
  return FusedCrossEntropy::apply(logits, targets, options.ignore_index(),
                                  static_cast<int64_t>(options.reduction()), counted);
}

}  // namespace accelerate
