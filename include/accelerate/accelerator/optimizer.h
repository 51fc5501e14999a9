// accelerate::Optimizer<Base>: a LibTorch optimizer with Accelerate's
// stepping semantics. C++ cannot swap the optimizer a program already holds
// for a wrapper (Python's prepare() can), so a program declares its optimizer
// through this template instead:
//
//   - torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
//   + accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
//   torch::optim::AdamWOptions(1e-3));
//
// It is a Base (same constructors, options, state, serialisation). Until
// accelerator.prepare() sees it, it behaves exactly like Base. Once prepared,
// step() and zero_grad() do nothing on steps where gradients are being
// accumulated (GradientState::sync_gradients() is false), as in Accelerate.
// With fp16 mixed precision the Accelerator attaches its GradScaler: step()
// then unscales (unless already done), skips the step if a gradient is
// inf/NaN (optimizer_step_was_skipped(); schedulers don't advance) and
// updates the scale.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include <torch/optim/optimizer.h>

#include "accelerate/accelerator/gradient_state.h"
#include "accelerate/precision/grad_scaler.h"

namespace accelerate {

// What sharded training (ZeRO, docs/sharding.md) adds around a prepared
// optimizer's step: the optimizer's parameter groups then hold this
// process's shards of the parameters, so the step updates only those.
class OptimizerShardHooks {
 public:
  virtual ~OptimizerShardHooks() = default;
  // Before Base::step (and before the GradScaler unscales): the shards'
  // gradients are in place.
  virtual void before_step() = 0;
  // After it: every process's updated shards gathered into the model (not
  // when the step was skipped, on every process alike).
  virtual void after_step(bool stepped) = 0;
  // Instead of Base::zero_grad: the model's gradients and the shards'.
  virtual void zero_grad(bool set_to_none) = 0;
};

// What prepare() needs from any accelerate::Optimizer<Base>.
class PreparedOptimizerBase {
 public:
  virtual ~PreparedOptimizerBase() = default;
  virtual torch::optim::Optimizer& base_optimizer() = 0;
  void attach(std::shared_ptr<GradientState> state) { state_ = std::move(state); }
  bool is_prepared() const { return state_ != nullptr; }
  // Loss scaling for fp16 (null: none).
  void attach_scaler(std::shared_ptr<GradScaler> scaler) { scaler_ = std::move(scaler); }
  const std::shared_ptr<GradScaler>& scaler() const { return scaler_; }
  void attach_shard_hooks(std::shared_ptr<OptimizerShardHooks> hooks) { hooks_ = std::move(hooks); }
  const std::shared_ptr<OptimizerShardHooks>& shard_hooks() const { return hooks_; }

 protected:
  // Accelerate's step around `base_step` (the wrapped optimizer's own):
  // nothing while gradients accumulate; the shard hooks around it; with a
  // GradScaler, unscale, skip on inf/NaN and update the scale.
  torch::Tensor prepared_step(const std::function<torch::Tensor()>& base_step) {
    if (!should_act()) {
      record(false);
      return {};
    }
    torch::Tensor loss;
    if (hooks_) hooks_->before_step();
    bool stepped = true;
    if (!scaler_) {
      loss = base_step();
    } else {
      stepped = scaler_->step(base_optimizer(), [&] { loss = base_step(); });
      scaler_->update();
    }
    if (hooks_) hooks_->after_step(stepped);
    record(stepped);
    return loss;
  }
  // Accelerate's zero_grad around `base_zero_grad`: nothing while gradients
  // accumulate; the shard hooks' instead of it under ZeRO.
  void prepared_zero_grad(bool set_to_none, const std::function<void()>& base_zero_grad) {
    if (!should_act()) return;
    if (hooks_) return hooks_->zero_grad(set_to_none);
    base_zero_grad();
  }
  bool should_act() const { return !state_ || state_->sync_gradients(); }
  void record(bool stepped) {
    if (!state_) return;
    state_->set_optimizer_step_was_skipped(!stepped);
    if (stepped) state_->count_optimizer_step();
  }

 private:
  std::shared_ptr<GradientState> state_;
  std::shared_ptr<GradScaler> scaler_;
  std::shared_ptr<OptimizerShardHooks> hooks_;
};

template <class Base>
class Optimizer : public Base, public PreparedOptimizerBase {
  static_assert(std::is_base_of<torch::optim::Optimizer, Base>::value,
                "accelerate::Optimizer<Base> needs a torch::optim optimizer");

 public:
  using Base::Base;

  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr) override {
    return prepared_step([&] { return Base::step(std::move(closure)); });
  }

  void zero_grad() {
    prepared_zero_grad(/*set_to_none=*/false, [this] { Base::zero_grad(); });
  }
  // LibTorch 2.x's zero_grad(set_to_none); absent on 1.13 (SFINAE keeps it
  // from being instantiated there).
  template <class B = Base>
  auto zero_grad(bool set_to_none) -> decltype(std::declval<B&>().zero_grad(set_to_none)) {
    prepared_zero_grad(set_to_none, [&] { Base::zero_grad(set_to_none); });
  }

  torch::optim::Optimizer& base_optimizer() override { return *this; }
};

}  // namespace accelerate
