#include "nn/split_linear.h"

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"

namespace accelerate::detail {
std::string split_layer_name(const char* layer, TensorParallelStyle style,
                             const TensorParallel& tp) {
  return std::string(layer) + " (" + to_string(style) + ", tp " + std::to_string(tp.size()) + ")";
}

void require_splittable(int64_t total, const char* what, const std::string& layer,
                        const TensorParallel& tp) {
  if (total < tp.size()) {
    throw ConfigError(layer + ": " + std::to_string(total) + " " + what +
                      " cannot be split over tp_size " + std::to_string(tp.size()));
  }
}

void check_linear_split(const LinearSplit& current, const LinearSplit& to) {
  if (current.splits())
    throw ConfigError(current.name() + ": already split; a layer is split once");
  if (!to.splits()) return;
  if (to.style == TensorParallelStyle::kRowwise) {
    require_splittable(to.in_features, "input features", to.name(), to.tp);
    return;
  }
  require_splittable(to.out_features / to.output_blocks, "output features", to.name(), to.tp);
  if (to.style != TensorParallelStyle::kColwiseRep) return;
  if (to.output_blocks > 1) {
    throw ConfigError(to.name() + ": its output is " + std::to_string(to.output_blocks) +
                      " fused blocks, which a gathered result would interleave; use colwise");
  }
  if (to.out_features % to.tp.size() != 0) {
    throw ConfigError(to.name() + ": " + std::to_string(to.out_features) +
                      " output features are not divisible by tp_size " +
                      std::to_string(to.tp.size()) + " (the result is gathered whole)");
  }
}

void require_input_width(const at::Tensor& x, const LinearSplit& split) {
  const int64_t width = x.dim() == 0 ? -1 : x.size(-1);
  if (width != split.in_features) {
    throw Error(split.name() + ": the input has " + std::to_string(width) + " features, not " +
                std::to_string(split.in_features));
  }
}

at::Tensor split_linear_forward(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias, const LinearSplit& split) {
  const TensorParallel& tp = split.tp;
  const int64_t width = x.dim() == 0 ? -1 : x.size(-1);
  if (split.style == TensorParallelStyle::kRowwise) {
    const int64_t part = weight.size(1), whole = split.in_features;
    at::Tensor x_part = x;
    if (width != part) {
      if (width != whole || whole % tp.size() != 0) {
        throw Error(split.name() + ": the input has " + std::to_string(width) +
                    " features, not this rank's " + std::to_string(part) +
                    (whole % tp.size() == 0 ? " or the whole " + std::to_string(whole) : ""));
      }
      x_part = scatter_to_tensor_parallel(x, tp, -1);
    }
    const at::Tensor partial = at::linear(x_part, weight);
    if (!split.sequence_parallel) {
      at::Tensor y = reduce_from_tensor_parallel(partial, tp);
      return bias.defined() ? y + bias : y;
    }
    at::Tensor y = reduce_scatter_tokens(partial, tp);
    return bias.defined() ? y + copy_to_tensor_parallel(bias, tp) : y;
  }
  require_input_width(x, split);  // before the collective: alike on every rank, never a hang
  const at::Tensor y =
      colwise_linear(x, weight, bias, TensorParallel(tp.group(), split.sequence_parallel));
  return split.style == TensorParallelStyle::kColwiseRep ? gather_from_tensor_parallel(y, tp, -1)
                                                         : y;
}

}  // namespace accelerate::detail
