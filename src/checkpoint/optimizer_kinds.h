// LibTorch's built-in optimizers as the checkpoint code knows them: their
// per-parameter state tensors by name, how to make an empty state, and how to
// make another optimizer of the same type. Internal to the library.
#pragma once

#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include <torch/optim/optimizer.h>

namespace accelerate::checkpoint {

// One state tensor of a built-in optimizer's per-parameter state.
struct StateTensor {
  const char* name;
  at::Tensor& (*slot)(torch::optim::OptimizerParamState&);
  // Its shape from its parameter's; null: the parameter's own (Adafactor's
  // factored moments are a matrix's row and column averages).
  std::vector<int64_t> (*shape)(c10::IntArrayRef param_sizes) = nullptr;
};

// `tensor`'s shape for a parameter of `param_sizes`.
std::vector<int64_t> state_tensor_shape(const StateTensor& tensor, c10::IntArrayRef param_sizes);

struct Kind {
  const char* name;
  const std::type_info& type;
  const std::type_info& prepared_type;  // accelerate::Optimizer<type>
  std::unique_ptr<torch::optim::OptimizerParamState> (*make_state)();
  bool (*holds)(const torch::optim::OptimizerParamState&);
  // An optimizer of this type over `groups` (each with its own options).
  std::unique_ptr<torch::optim::Optimizer> (*make_optimizer)(
      std::vector<torch::optim::OptimizerParamGroup> groups);
  std::vector<StateTensor> tensors;
};

const std::vector<Kind>& kinds();
// The built-in kind of `optimizer` (exactly that class, or
// accelerate::Optimizer of it: a subclass may save more), or null.
const Kind* kind_of(const torch::optim::Optimizer& optimizer);
const StateTensor* find_tensor(const Kind& kind, const std::string& name);

}  // namespace accelerate::checkpoint
