#include "sharding/parameter_units.h"

#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include "accelerate/common/errors.h"
#include "accelerate/sharding/unit_forward.h"
#include "compat/autograd_compat.h"
#include "parallel/sharded_gradients.h"

namespace accelerate::sharding {

struct ParameterUnits::State {
  struct Unit {
    // A unit is a child module, always owned by a shared_ptr; weak, since
    // the model may go before the Accelerator.
    std::weak_ptr<torch::nn::Module> module;
    std::vector<std::size_t> buckets;    // the reducer's buckets holding its parameters
    std::vector<at::Tensor> parameters;  // those parameters (freed with the buckets)
    std::size_t parameter_count = 0;     // trainable ones, each counted down in backward
    std::size_t waiting_for = 0;         // parameters still without a gradient this backward
    bool through_forward = false;        // ran through unit_forward: free between runs
  };
  struct InstalledHook {
    compat::AutogradNodePtr accumulator;
    std::uintptr_t key = 0;
  };
  std::shared_ptr<ModelShards> shards;
  std::vector<Unit> units;
  std::vector<InstalledHook> hooks;
  bool reshard_after_forward = true;
  bool prefetch_forward = true, prefetch_backward = true;
  std::vector<std::size_t> order;      // units as the last complete forward ran them
  std::vector<int> position;           // unit -> index in `order`, or -1
  std::vector<std::size_t> recording;  // the forward pass in progress

  bool gathered(const Unit& unit) const {
    for (std::size_t b : unit.buckets) {
      if (shards->bucket_released(b)) return false;
    }
    return true;
  }
  void gather(Unit& unit) {
    for (std::size_t b : unit.buckets) shards->gather_bucket(b);  // waits for a prefetch
  }
  // The next unit's gather runs while this one computes: in forward the
  // unit after it, in backward the one before it, in the order the units
  // ran in the last forward pass (the same on every process, so the
  // collectives stay matched; a wrong guess only gathers early).
  void prefetch(std::size_t u, int step) {
    if (!(step > 0 ? prefetch_forward : prefetch_backward) || position[u] < 0) return;
    const int next = position[u] + step;
    if (next < 0 || next >= static_cast<int>(order.size())) return;
    for (std::size_t b : units[order[static_cast<std::size_t>(next)]].buckets) {
      shards->start_gather(b);
    }
  }
  // Records the order units run in; a unit running again starts a new pass.
  void note_run(std::size_t u) {
    for (std::size_t seen : recording) {
      if (seen == u) {
        adopt_order();
        break;
      }
    }
    recording.push_back(u);
  }
  void adopt_order() {
    if (recording.empty()) return;
    order = recording;
    recording.clear();
    position.assign(units.size(), -1);
    for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);
  }
  void release(Unit& unit) {
    for (std::size_t b : unit.buckets) shards->release_bucket(b);
  }
  void on_gradient_ready(std::size_t u) {
    Unit& unit = units[u];
    if (unit.waiting_for > 0 && --unit.waiting_for == 0 && unit.through_forward) release(unit);
  }
  at::Tensor run(std::size_t u, const std::function<at::Tensor()>& forward,
                 const std::shared_ptr<State>& self) {
    Unit& unit = units[u];
    note_run(u);
    gather(unit);
    prefetch(u, +1);
    unit.through_forward = true;
    at::Tensor output = forward();
    if (at::GradMode::is_enabled() && output.requires_grad()) {
      // Before the unit's backward: its weights again. The hook holds the
      // state, since a graph can outlive a step.
      std::weak_ptr<State> weak = self;
      output.register_hook([weak, u](const at::Tensor& grad) {
        if (auto state = weak.lock()) {
          state->gather(state->units[u]);
          state->prefetch(u, -1);
          // Its gradients go straight into their reduce-scatter buffers.
          for (std::size_t b : state->units[u].buckets) {
            detail::ShardedGradients::begin_bucket_gradients(state->shards->reducer(), b);
          }
        }
        return grad;
      });
    }
    if (reshard_after_forward) release(unit);
    return output;
  }
};

namespace {

// Marks a unit module: unit_forward finds it among the module's children.
// It holds nothing a state dict or parameters() would see.
class UnitHandle : public torch::nn::Module {
 public:
  UnitHandle(std::weak_ptr<ParameterUnits::State> state, std::size_t unit)
      : torch::nn::Module("accelerate::UnitHandle"), state_(std::move(state)), unit_(unit) {}
  std::shared_ptr<ParameterUnits::State> state() const { return state_.lock(); }
  std::size_t unit() const { return unit_; }

 private:
  std::weak_ptr<ParameterUnits::State> state_;
  std::size_t unit_;
};

// Counts a unit's parameters down as their gradients become final
// (AccumulateGrad runs post hooks after updating .grad).
class UnitGradientHook : public torch::autograd::FunctionPostHook {
 public:
  UnitGradientHook(ParameterUnits::State* state, std::size_t unit) : state_(state), unit_(unit) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    state_->on_gradient_ready(unit_);
    return outputs;
  }

 private:
  ParameterUnits::State* state_;
  std::size_t unit_;
};

}  // namespace

std::vector<int> parameter_units(torch::nn::Module& root,
                                 const std::vector<torch::nn::Module*>& units) {
  // Which units hold each parameter, and the parameters held outside units.
  std::unordered_map<const c10::TensorImpl*, std::unordered_set<int>> holders;
  std::unordered_set<const torch::nn::Module*> unit_modules(units.begin(), units.end());
  for (std::size_t u = 0; u < units.size(); ++u) {
    for (const at::Tensor& p : units[u]->parameters(true)) {
      holders[p.unsafeGetTensorImpl()].insert(static_cast<int>(u));
    }
  }
  std::unordered_set<const c10::TensorImpl*> outside;
  // Modules not inside a unit: walk from the root, not descending into units.
  std::vector<torch::nn::Module*> stack{&root};
  while (!stack.empty()) {
    torch::nn::Module* module = stack.back();
    stack.pop_back();
    if (unit_modules.count(module) != 0) continue;
    for (const at::Tensor& p : module->parameters(false)) outside.insert(p.unsafeGetTensorImpl());
    for (const auto& child : module->children()) stack.push_back(child.get());
  }
  std::vector<int> unit_of;
  for (const at::Tensor& p : root.parameters(true)) {
    const auto it = holders.find(p.unsafeGetTensorImpl());
    const bool one_unit = it != holders.end() && it->second.size() == 1 &&
                          outside.count(p.unsafeGetTensorImpl()) == 0;
    unit_of.push_back(one_unit ? *it->second.begin() : -1);
  }
  return unit_of;
}

ParameterUnits::ParameterUnits(std::shared_ptr<ModelShards> shards,
                               const std::vector<torch::nn::Module*>& units,
                               const std::vector<int>& unit_of, bool reshard_after_forward,
                               bool prefetch_forward, bool prefetch_backward, bool start_released)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.shards = std::move(shards);
  s.reshard_after_forward = reshard_after_forward;
  s.prefetch_forward = prefetch_forward;
  s.prefetch_backward = prefetch_backward;
  s.position.assign(units.size(), -1);
  s.units.resize(units.size());
  GradientReducer& reducer = s.shards->reducer();
  const auto& parameters = reducer.parameters();
  if (unit_of.size() != parameters.size()) {
    throw Error("ZeRO-3: unit_of has " + std::to_string(unit_of.size()) + " entries for " +
                std::to_string(parameters.size()) + " parameters");
  }
  for (std::size_t u = 0; u < units.size(); ++u) s.units[u].module = units[u]->shared_from_this();
  const auto& buckets = reducer.buckets();
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const int u = unit_of[buckets[b].parameter_indices.front()];
    if (u >= 0) s.units[static_cast<std::size_t>(u)].buckets.push_back(b);
  }
  for (std::size_t index = 0; index < parameters.size(); ++index) {
    const int u = unit_of[index];
    if (u < 0 || detail::ShardedGradients::offset_in_bucket(reducer, index) < 0)
      continue;  // outside, or frozen
    State::Unit& unit = s.units[static_cast<std::size_t>(u)];
    unit.parameters.push_back(parameters[index]);
    ++unit.parameter_count;
    auto accumulator = torch::autograd::impl::grad_accumulator(parameters[index]);
    if (!accumulator) throw Error("ZeRO-3: parameter " + std::to_string(index) + " is not a leaf");
    const auto key = accumulator->add_post_hook(
        std::make_unique<UnitGradientHook>(&s, static_cast<std::size_t>(u)));
    s.hooks.push_back(State::InstalledHook{accumulator, key});
  }
  for (std::size_t u = 0; u < s.units.size(); ++u) {
    s.units[u].waiting_for = s.units[u].parameter_count;
    units[u]->register_module(kHandleName, std::make_shared<UnitHandle>(state_, u));
    if (start_released) {
      s.units[u].through_forward = true;
      s.release(s.units[u]);
    }
  }
}

ParameterUnits::~ParameterUnits() {
  for (auto& hook : state_->hooks) hook.accumulator->del_post_hook(hook.key);
  // No collective here (a process leaving on an error would wait for the
  // others' timeout): units whose weights are freed keep their mark, with
  // the state gone, so that running them is a clear error, not garbage.
  for (auto& unit : state_->units) {
    const auto module = unit.module.lock();
    if (module && state_->gathered(unit) && module->named_children().contains(kHandleName)) {
      module->unregister_module(kHandleName);
    }
  }
}

void ParameterUnits::after_backward() {
  state_->adopt_order();
  for (auto& unit : state_->units) {
    if (unit.through_forward && state_->gathered(unit)) state_->release(unit);
    unit.waiting_for = unit.parameter_count;
  }
}

void ParameterUnits::gather_all() {
  for (auto& unit : state_->units) state_->gather(unit);
}

void ParameterUnits::release_all() {
  for (auto& unit : state_->units) {
    if (unit.through_forward) state_->release(unit);
  }
}

namespace {

class UnitWeights : public checkpoint::WeightGroups {
 public:
  explicit UnitWeights(std::shared_ptr<ParameterUnits::State> state) : state_(std::move(state)) {}
  std::size_t count() const override { return state_->units.size(); }
  std::vector<at::Tensor> tensors(std::size_t g) const override {
    return state_->units.at(g).parameters;
  }
  void gather(std::size_t g) override { state_->gather(state_->units.at(g)); }
  void release(std::size_t g) override {
    auto& unit = state_->units.at(g);
    if (unit.through_forward) state_->release(unit);
  }

 private:
  std::shared_ptr<ParameterUnits::State> state_;
};

}  // namespace

std::unique_ptr<checkpoint::WeightGroups> ParameterUnits::weight_groups() {
  return std::make_unique<UnitWeights>(state_);
}

ModelShards* unit_shards(const torch::nn::Module& unit) {
  const auto children = unit.named_children();
  const auto* child = children.find(ParameterUnits::kHandleName);
  const auto* handle = child ? dynamic_cast<const UnitHandle*>(child->get()) : nullptr;
  const auto state = handle ? handle->state() : nullptr;
  return state ? state->shards.get() : nullptr;
}

}  // namespace accelerate::sharding

namespace accelerate::detail {

at::Tensor run_as_unit(torch::nn::Module& module, const std::function<at::Tensor()>& forward) {
  const auto children = module.named_children();
  const auto* child = children.find(sharding::ParameterUnits::kHandleName);
  if (child == nullptr) return forward();
  const auto* handle = dynamic_cast<const sharding::UnitHandle*>(child->get());
  if (handle == nullptr) return forward();
  auto state = handle->state();
  if (!state) {
    throw Error("ZeRO-3: the weights of unit " + module.name() +
                " are sharded by an Accelerator that no longer exists; keep the Accelerator "
                "while the model runs, or take the weights first (accelerator.get_state_dict)");
  }
  return state->run(handle->unit(), forward, state);
}

}  // namespace accelerate::detail
