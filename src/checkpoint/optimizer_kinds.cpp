#include "checkpoint/optimizer_kinds.h"

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "accelerate/accelerator/optimizer.h"
#include "accelerate/schedule/adafactor.h"
#include "accelerate/schedule/fused_adamw.h"

namespace accelerate::checkpoint {
namespace {

using torch::optim::OptimizerParamState;

// The StateTensor for State::field().
// clang-format off
#define ACCELERATE_STATE_TENSOR(State, field)                                  \
  StateTensor{#field, [](OptimizerParamState& s) -> at::Tensor& {              \
    return static_cast<State&>(s).field();                                     \
  }}
// clang-format on

template <class Opt, class State, class Options>
Kind kind(const char* name, std::vector<StateTensor> tensors) {
  return {name,
          typeid(Opt),
          typeid(accelerate::Optimizer<Opt>),
          []() -> std::unique_ptr<OptimizerParamState> { return std::make_unique<State>(); },
          [](const OptimizerParamState& s) { return dynamic_cast<const State*>(&s) != nullptr; },
          [](std::vector<torch::optim::OptimizerParamGroup> groups)
              -> std::unique_ptr<torch::optim::Optimizer> {
            // Every group brings its options; the defaults matter for none.
            const Options defaults = static_cast<const Options&>(groups.at(0).options());
            return std::make_unique<Opt>(std::move(groups), defaults);
          },
          std::move(tensors)};
}

StateTensor with_shape(StateTensor tensor, std::vector<int64_t> (*shape)(c10::IntArrayRef)) {
  tensor.shape = shape;
  return tensor;
}

// A matrix's (or a stack of matrices') row averages: all but the last dimension.
std::vector<int64_t> row_shape(c10::IntArrayRef sizes) {
  std::vector<int64_t> shape = sizes.vec();
  if (!shape.empty()) shape.pop_back();
  return shape;
}

// Its column averages: all but the second-last dimension.
std::vector<int64_t> column_shape(c10::IntArrayRef sizes) {
  std::vector<int64_t> shape = sizes.vec();
  if (shape.size() >= 2) shape.erase(shape.end() - 2);
  return shape;
}

}  // namespace

std::vector<int64_t> state_tensor_shape(const StateTensor& tensor, c10::IntArrayRef param_sizes) {
  return tensor.shape ? tensor.shape(param_sizes) : param_sizes.vec();
}

const std::vector<Kind>& kinds() {
  using namespace torch::optim;
  static const std::vector<Kind> all = {
      kind<SGD, SGDParamState, SGDOptions>(
          "SGD", {ACCELERATE_STATE_TENSOR(SGDParamState, momentum_buffer)}),
      kind<Adam, AdamParamState, AdamOptions>(
          "Adam", {ACCELERATE_STATE_TENSOR(AdamParamState, exp_avg),
                   ACCELERATE_STATE_TENSOR(AdamParamState, exp_avg_sq),
                   ACCELERATE_STATE_TENSOR(AdamParamState, max_exp_avg_sq)}),
      kind<AdamW, AdamWParamState, AdamWOptions>(
          "AdamW", {ACCELERATE_STATE_TENSOR(AdamWParamState, exp_avg),
                    ACCELERATE_STATE_TENSOR(AdamWParamState, exp_avg_sq),
                    ACCELERATE_STATE_TENSOR(AdamWParamState, max_exp_avg_sq)}),
      // AdamW's state and name: either one loads the other's checkpoints.
      kind<accelerate::FusedAdamW, AdamWParamState, AdamWOptions>(
          "AdamW", {ACCELERATE_STATE_TENSOR(AdamWParamState, exp_avg),
                    ACCELERATE_STATE_TENSOR(AdamWParamState, exp_avg_sq),
                    ACCELERATE_STATE_TENSOR(AdamWParamState, max_exp_avg_sq)}),
      kind<Adagrad, AdagradParamState, AdagradOptions>(
          "Adagrad", {ACCELERATE_STATE_TENSOR(AdagradParamState, sum)}),
      kind<RMSprop, RMSpropParamState, RMSpropOptions>(
          "RMSprop", {ACCELERATE_STATE_TENSOR(RMSpropParamState, square_avg),
                      ACCELERATE_STATE_TENSOR(RMSpropParamState, momentum_buffer),
                      ACCELERATE_STATE_TENSOR(RMSpropParamState, grad_avg)}),
      // Its step and parameter RMS are plain fields, saved with the options.
      kind<accelerate::Adafactor, accelerate::AdafactorParamState, accelerate::AdafactorOptions>(
          "Adafactor",
          {ACCELERATE_STATE_TENSOR(accelerate::AdafactorParamState, exp_avg),
           with_shape(ACCELERATE_STATE_TENSOR(accelerate::AdafactorParamState, exp_avg_sq_row),
                      row_shape),
           with_shape(ACCELERATE_STATE_TENSOR(accelerate::AdafactorParamState, exp_avg_sq_col),
                      column_shape),
           ACCELERATE_STATE_TENSOR(accelerate::AdafactorParamState, exp_avg_sq)}),
  };
  return all;
}
#undef ACCELERATE_STATE_TENSOR

const Kind* kind_of(const torch::optim::Optimizer& optimizer) {
  for (const auto& k : kinds()) {
    if (typeid(optimizer) == k.type || typeid(optimizer) == k.prepared_type) return &k;
  }
  return nullptr;
}

const StateTensor* find_tensor(const Kind& kind, const std::string& name) {
  for (const auto& t : kind.tensors) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

}  // namespace accelerate::checkpoint
