// Activation checkpointing as a custom autograd function: forward runs the
// function without grad mode (nothing is saved but its inputs), backward
// runs it again with grad mode and the recorded random and autocast state,
// and differentiates that second run. Parameters are inputs of the node, so
// their gradients reach their AccumulateGrad nodes (and the hooks gradient
// sync puts there) as without checkpointing.
#include "accelerate/memory/activation_checkpointing.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <map>
#include <optional>
#include <utility>

#include "accelerate/common/errors.h"
#include "accelerate/common/scope_guard.h"
#include "checkpoint/generator_state.h"
#include "compat/autocast_compat.h"

namespace accelerate {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct AutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::kBFloat16;
};

// What the recomputation needs besides the saved inputs.
struct Replay : torch::CustomClassHolder {
  CheckpointedFunction fn;
  std::vector<at::Tensor> parameters;
  std::vector<bool> input_requires_grad;
  std::optional<at::Tensor> cpu_rng;
  std::map<c10::DeviceIndex, at::Tensor> cuda_rng;  // by device of the inputs
  AutocastState cpu_autocast, cuda_autocast;
};

AutocastState autocast_state(c10::DeviceType device) {
  return {compat::autocast_enabled(device), compat::autocast_dtype(device)};
}

void set_autocast_state(c10::DeviceType device, const AutocastState& state) {
  compat::set_autocast_enabled(device, state.enabled);
  compat::set_autocast_dtype(device, state.dtype);
}

at::Generator cuda_generator(c10::DeviceIndex index) {
  return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, index));
}

// Puts the recorded generator and autocast state in place for the
// recomputation and the caller's back afterwards, so backward does not
// change what the training loop draws next.
class ReplayScope {
 public:
  explicit ReplayScope(const Replay& replay) {
    if (replay.cpu_rng) {
      cpu_rng_ = detail::generator_state(at::detail::getDefaultCPUGenerator());
      detail::set_generator_state(at::detail::getDefaultCPUGenerator(), *replay.cpu_rng);
    }
    for (const auto& [index, state] : replay.cuda_rng) {
      cuda_rng_[index] = detail::generator_state(cuda_generator(index));
      detail::set_generator_state(cuda_generator(index), state);
    }
    cpu_autocast_ = autocast_state(c10::kCPU);
    cuda_autocast_ = autocast_state(c10::kCUDA);
    set_autocast_state(c10::kCPU, replay.cpu_autocast);
    set_autocast_state(c10::kCUDA, replay.cuda_autocast);
  }
  ~ReplayScope() {
    set_autocast_state(c10::kCPU, cpu_autocast_);
    set_autocast_state(c10::kCUDA, cuda_autocast_);
    if (cpu_rng_) detail::set_generator_state(at::detail::getDefaultCPUGenerator(), *cpu_rng_);
    for (const auto& [index, state] : cuda_rng_) {
      detail::set_generator_state(cuda_generator(index), state);
    }
  }
  ReplayScope(const ReplayScope&) = delete;
  ReplayScope& operator=(const ReplayScope&) = delete;

 private:
  std::optional<at::Tensor> cpu_rng_;
  std::map<c10::DeviceIndex, at::Tensor> cuda_rng_;
  AutocastState cpu_autocast_, cuda_autocast_;
};

// Runs fn with autocast's cache of cast weights off: a copy cast in the
// first run (without grad mode) has no graph, and reusing it in the
// recomputation, or elsewhere in the region, would cut the weights off from
// their gradients.
std::vector<at::Tensor> run_checked(const CheckpointedFunction& fn,
                                    const std::vector<at::Tensor>& inputs) {
  const bool cache_enabled = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  ScopeGuard restore_cache([&] { at::autocast::set_autocast_cache_enabled(cache_enabled); });
  std::vector<at::Tensor> outputs = fn(inputs);
  if (outputs.empty()) throw Error("accelerate::checkpoint: the function returned no tensor");
  return outputs;
}

struct CheckpointNode : torch::autograd::Function<CheckpointNode> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<Replay> replay,
                               at::TensorList inputs, at::TensorList /*parameters*/) {
    // Autograd runs this without grad mode: fn keeps no activations.
    std::vector<at::Tensor> in(inputs.begin(), inputs.end());
    ctx->save_for_backward(in);
    variable_list outputs = run_checked(replay->fn, in);
    ctx->saved_data["replay"] = c10::IValue::make_capsule(std::move(replay));
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    std::vector<at::Tensor> inputs;
    for (std::size_t i = 0; i < ctx->get_saved_variables().size(); ++i) {
      inputs.push_back(
          ctx->get_saved_variables()[i].detach().requires_grad_(replay->input_requires_grad[i]));
    }
    std::vector<at::Tensor> outputs;
    {
      ReplayScope scope(*replay);
      at::AutoGradMode grad_mode(true);
      outputs = run_checked(replay->fn, inputs);
    }
    // Differentiate the recomputed outputs that carry a gradient.
    std::vector<at::Tensor> roots, root_grads;
    for (std::size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grad_outputs[i]);
      }
    }
    std::vector<at::Tensor> targets;
    for (const auto& input : inputs) {
      if (input.requires_grad()) targets.push_back(input);
    }
    targets.insert(targets.end(), replay->parameters.begin(), replay->parameters.end());
    std::vector<at::Tensor> grads(targets.size());
    if (!roots.empty() && !targets.empty()) {
      grads = torch::autograd::grad(roots, targets, root_grads, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    // One entry per forward argument: none for the replay, then the inputs
    // (none where no gradient is wanted), then the parameters.
    variable_list result{at::Tensor()};
    std::size_t next = 0;
    for (const auto& input : inputs) {
      result.push_back(input.requires_grad() ? grads[next++] : at::Tensor());
    }
    for (std::size_t p = 0; p < replay->parameters.size(); ++p) result.push_back(grads[next++]);
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> checkpoint_function(const CheckpointedFunction& fn,
                                            const std::vector<at::Tensor>& inputs,
                                            const std::vector<at::Tensor>& parameters,
                                            ActivationCheckpointOptions options) {
  if (!at::GradMode::is_enabled()) return run_checked(fn, inputs);
  auto replay = c10::make_intrusive<Replay>();
  replay->fn = fn;
  for (const auto& p : parameters) {
    if (p.requires_grad()) replay->parameters.push_back(p);
  }
  for (const auto& input : inputs) replay->input_requires_grad.push_back(input.requires_grad());
  if (options.preserve_rng_state()) {
    replay->cpu_rng = detail::generator_state(at::detail::getDefaultCPUGenerator());
    for (const auto& input : inputs) {
      if (input.is_cuda() && !replay->cuda_rng.count(input.get_device())) {
        const auto index = static_cast<c10::DeviceIndex>(input.get_device());
        replay->cuda_rng[index] = detail::generator_state(cuda_generator(index));
      }
    }
  }
  replay->cpu_autocast = autocast_state(c10::kCPU);
  replay->cuda_autocast = autocast_state(c10::kCUDA);
  const std::vector<at::Tensor> used_parameters = replay->parameters;
  return CheckpointNode::apply(std::move(replay), at::TensorList(inputs),
                               at::TensorList(used_parameters));
}

}  // namespace accelerate
