// vocab_parallel_cross_entropy (parallel_layers.h): Megatron's loss over
// logits split by classes. Per row, with m the row's maximum, s the sum of
// exp(logit - m) and t the target's logit, all three over the whole
// vocabulary: loss = log(s) + m - t. Each rank computes its classes' share
// of each and the group all-reduces three [rows] vectors; backward is local:
// d loss / d logit = softmax(logit) - [class is the target].
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>
#include <utility>

#include "accelerate/common/errors.h"
#include "accelerate/nn/parallel_layers.h"
#include "nn/group_capsule.h"

namespace accelerate {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows whose target is in this rank's classes [start, start + part).
struct TargetsHere {
  at::Tensor mine;   // [rows] bool
  at::Tensor local;  // [rows] int64: the target's column here (0 where not mine)
};

TargetsHere targets_here(const at::Tensor& targets, int64_t start, int64_t part) {
  const at::Tensor local = targets - start;
  const at::Tensor mine = (local >= 0) & (local < part);
  return {mine, local.masked_fill(mine.logical_not(), 0)};
}

struct VocabParallelLoss : torch::autograd::Function<VocabParallelLoss> {
  // One loss per row, float, 0 where the target is ignore_index.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, c10::IValue group, int64_t start,
                            int64_t ignore_index) {
    Communicator& tp = detail::group_of(group);
    const at::Tensor x = logits.to(at::kFloat);
    at::Tensor maximum = std::get<0>(x.max(1));
    tp.all_reduce(maximum, ReduceOp::kMax);
    at::Tensor exp_sum = (x - maximum.unsqueeze(1)).exp().sum(1);
    tp.all_reduce(exp_sum, ReduceOp::kSum);
    const TargetsHere here = targets_here(targets, start, x.size(1));
    at::Tensor target_logit =
        x.gather(1, here.local.unsqueeze(1)).squeeze(1).masked_fill(here.mine.logical_not(), 0);
    tp.all_reduce(target_logit, ReduceOp::kSum);
    const at::Tensor ignored = targets == ignore_index;
    ctx->save_for_backward({logits, targets, maximum, exp_sum});
    ctx->saved_data["start"] = start;
    ctx->saved_data["ignore_index"] = ignore_index;
    return (exp_sum.log() + maximum - target_logit).masked_fill(ignored, 0);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &targets = saved[1], &maximum = saved[2],
                     &exp_sum = saved[3];
    const int64_t start = ctx->saved_data["start"].toInt();
    const int64_t ignore_index = ctx->saved_data["ignore_index"].toInt();
    at::Tensor grad =
        (logits.to(at::kFloat) - maximum.unsqueeze(1)).exp_().div_(exp_sum.unsqueeze(1));
    const TargetsHere here = targets_here(targets, start, logits.size(1));
    grad.scatter_add_(1, here.local.unsqueeze(1), here.mine.to(at::kFloat).neg().unsqueeze(1));
    const at::Tensor row_grad = grads[0].to(at::kFloat).masked_fill(targets == ignore_index, 0);
    grad.mul_(row_grad.unsqueeze(1));
    return {grad.to(logits.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The checks cross_entropy makes, on the part and the whole vocabulary, all
// before any message (every rank sees the same targets and shapes).
void require_loss_inputs(const at::Tensor& logits, const at::Tensor& targets, int64_t classes,
                         TensorParallelRange range, const TensorParallel& tp,
                         int64_t ignore_index) {
  const std::string where = "vocab_parallel_cross_entropy (tp " + std::to_string(tp.size()) + ")";
  if (logits.dim() != 2 || targets.dim() != 1 || logits.size(0) != targets.size(0)) {
    throw Error(where + " expects logits [rows, classes part] and targets [rows], got " +
                std::to_string(logits.dim()) + " and " + std::to_string(targets.dim()) +
                " dimensions");
  }
  if (!at::isFloatingType(logits.scalar_type()) ||
      !at::isIntegralType(targets.scalar_type(), false)) {
    throw Error(where + " expects floating logits and integer targets");
  }
  if (classes < tp.size()) {
    throw Error(where + ": " + std::to_string(classes) + " classes cannot be split over tp_size " +
                std::to_string(tp.size()));
  }
  if (logits.size(1) != range.length) {
    throw Error(where + ": this rank's logits have " + std::to_string(logits.size(1)) +
                " classes, but its part of " + std::to_string(classes) + " is " +
                std::to_string(range.length));
  }
  const at::Tensor outside = (targets != ignore_index) & ((targets < 0) | (targets >= classes));
  if (outside.any().item<bool>()) {  // one pass; the target looked for only when wrong
    throw Error(where + ": target " +
                std::to_string(targets.masked_select(outside)[0].item<int64_t>()) +
                " is outside the " + std::to_string(classes) + " classes");
  }
}

}  // namespace

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits_part, const at::Tensor& targets,
                                        int64_t classes, const TensorParallel& tp,
                                        CrossEntropyOptions options) {
  if (!tp.enabled()) {
    if (logits_part.dim() == 2 && logits_part.size(1) != classes) {
      throw Error("vocab_parallel_cross_entropy: the logits have " +
                  std::to_string(logits_part.size(1)) + " classes, not " + std::to_string(classes));
    }
    return cross_entropy(logits_part, targets, options);
  }
  const TensorParallelRange range = tensor_parallel_range(std::max<int64_t>(classes, 0), tp);
  require_loss_inputs(logits_part, targets, classes, range, tp, options.ignore_index());
  const at::Tensor losses =
      VocabParallelLoss::apply(logits_part, targets.to(at::kLong), detail::capsule_of(tp.group()),
                               range.start, options.ignore_index());
  switch (options.reduction()) {
    case LossReduction::kNone:
      return losses;
    case LossReduction::kSum:
      return losses.sum();
    case LossReduction::kMean:
      break;
  }
  return losses.sum() / (targets != options.ignore_index()).sum().to(at::kFloat);
}

}  // namespace accelerate
