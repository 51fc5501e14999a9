#include "accelerate/schedule/fused_adamw.h"

#include <ATen/record_function.h>
#include <torch/utils.h>

#include <cmath>
#include <memory>
#include <sstream>
#include <vector>

#include "accelerate/common/errors.h"
#include "compat/optim_compat.h"
#include "compat/parallel_ranges.h"
#include "schedule/adamw_kernel.h"

namespace accelerate {
namespace {

using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

// Elements per task: a task outlasts the thread pool's wake-up; a bias or a
// norm's weight runs on the calling thread.
constexpr int64_t kGrain = 1 << 15;

bool takes(const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat &&
         t.is_contiguous();
}

// The scalars LibTorch's AdamW computes in double for this step, as floats.
detail::AdamWScalars scalars(const AdamWOptions& options, int64_t step) {
  const double beta1 = std::get<0>(options.betas()), beta2 = std::get<1>(options.betas());
  const double correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  return {static_cast<float>(1.0 - options.lr() * options.weight_decay()),
          static_cast<float>(beta1),
          static_cast<float>(1.0 - beta1),
          static_cast<float>(beta2),
          static_cast<float>(1.0 - beta2),
          static_cast<float>(std::sqrt(correction2)),
          static_cast<float>(options.eps()),
          static_cast<float>(-options.lr() / correction1)};
}

// A state restored from a checkpoint may hold its moments elsewhere or in
// another layout; the loop needs them as the parameter is. A moment of
// another shape (a state loaded for other parameters) is an error: the loop
// would write past it.
void conform(AdamWParamState& state, const at::Tensor& param) {
  auto follow = [&](const at::Tensor& t, const char* name) {
    if (!t.defined() || !t.sizes().equals(param.sizes())) {
      std::ostringstream message;
      message << "FusedAdamW: the state's " << name << " is "
              << (t.defined() ? "of shape " : "missing");
      if (t.defined()) message << t.sizes();
      message << " for a parameter of shape " << param.sizes();
      throw Error(message.str());
    }
    return takes(t) ? t : t.to(param.options()).contiguous();
  };
  state.exp_avg(follow(state.exp_avg(), "exp_avg"));
  state.exp_avg_sq(follow(state.exp_avg_sq(), "exp_avg_sq"));
}

}  // namespace

bool FusedAdamW::steps_fused() const {
  for (const auto& group : param_groups_) {
    if (static_cast<const AdamWOptions&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params()) {
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      if (!takes(p) || !takes(grad) || !grad.sizes().equals(p.sizes())) return false;
    }
  }
  return true;
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  if (!steps_fused()) return AdamW::step(std::move(closure));
  RECORD_FUNCTION("accelerate::fused_adamw_step", std::vector<c10::IValue>());
  torch::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      std::unique_ptr<torch::optim::OptimizerParamState> owned = compat::take_param_state(*this, p);
      if (!owned) {
        auto fresh = std::make_unique<AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(at::zeros_like(p, at::MemoryFormat::Contiguous));
        fresh->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Contiguous));
        owned = std::move(fresh);
      }
      auto& state = static_cast<AdamWParamState&>(*owned);
      conform(state, p);
      state.step(state.step() + 1);
      const detail::AdamWScalars s = scalars(options, state.step());
      float* param = p.data_ptr<float>();
      const float* grad = p.grad().data_ptr<float>();
      float* exp_avg = state.exp_avg().data_ptr<float>();
      float* exp_avg_sq = state.exp_avg_sq().data_ptr<float>();
      compat::parallel_ranges(p.numel(), kGrain, [&](int64_t begin, int64_t end) {
        detail::adamw_step(param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin,
                           end - begin, s);
      });
      compat::set_param_state(*this, p, std::move(owned));
    }
  }
  return loss;
}

}  // namespace accelerate
