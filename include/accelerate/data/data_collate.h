// Collate: turns the examples of one batch into the batch the training loop
// sees. DefaultCollate stacks tensors along a new first dimension, as
// PyTorch's default_collate does for tensors:
//   at::Tensor                                -> stacked tensor
//   torch::data::Example<Tensor, Tensor>      -> Example{stack(data), stack(target)}
//   torch::data::Example<Tensor, NoTarget>    -> Example{stack(data)}
// Any other example type needs a collate of its own: a callable taking
// std::vector<ExampleType> and returning the batch. With num_workers > 1 it
// is called from several threads at once.
//
// KeepBatch yields what it is given: the default for batch datasets (whose
// get_batch already built the batch), and what make_data_loader uses to give
// the batch type LibTorch's own loader would.
#pragma once

#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <torch/data/example.h>

namespace accelerate {

namespace detail {
template <class T>
struct always_false : std::false_type {};
}  // namespace detail

struct KeepBatch {
  template <class Batch>
  Batch operator()(Batch batch) const {
    return batch;
  }
};

template <class ExampleType>
struct DefaultCollate {
  static_assert(detail::always_false<ExampleType>::value,
                "accelerate::DataLoader has no default collate for this example type: pass a "
                "collate function (std::vector<ExampleType> -> batch) as the third argument");
};

template <>
struct DefaultCollate<at::Tensor> {
  at::Tensor operator()(const std::vector<at::Tensor>& examples) const {
    return at::stack(examples);
  }
};

template <>
struct DefaultCollate<torch::data::Example<at::Tensor, at::Tensor>> {
  using Batch = torch::data::Example<at::Tensor, at::Tensor>;
  Batch operator()(const std::vector<Batch>& examples) const {
    std::vector<at::Tensor> data, targets;
    data.reserve(examples.size());
    targets.reserve(examples.size());
    for (const auto& example : examples) {
      data.push_back(example.data);
      targets.push_back(example.target);
    }
    return {at::stack(data), at::stack(targets)};
  }
};

template <>
struct DefaultCollate<torch::data::Example<at::Tensor, torch::data::example::NoTarget>> {
  using Batch = torch::data::Example<at::Tensor, torch::data::example::NoTarget>;
  Batch operator()(const std::vector<Batch>& examples) const {
    std::vector<at::Tensor> data;
    data.reserve(examples.size());
    for (const auto& example : examples) data.push_back(example.data);
    return {at::stack(data)};
  }
};

}  // namespace accelerate
