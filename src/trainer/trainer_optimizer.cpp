#include "accelerate/detail/trainer_optimizer.h"

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/detail/trainer_loop.h"
#include "accelerate/schedule/adafactor.h"
#include "accelerate/schedule/fused_adamw.h"

namespace accelerate::detail {

namespace {

// The groups of adamw_groups with each group's options rebuilt for `Options`
// (its weight decay kept).
template <class Options>
std::vector<torch::optim::OptimizerParamGroup> regroup(const torch::nn::Module& model,
                                                       const TrainingArguments& args,
                                                       const Options& base) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (auto& group : TrainerLoop::adamw_groups(model, args)) {
    const double decay =
        static_cast<const torch::optim::AdamWOptions&>(group.options()).weight_decay();
    auto options = std::make_unique<Options>(base);
    options->weight_decay(decay);
    groups.emplace_back(group.params(), std::move(options));
  }
  return groups;
}

template <class Base, class Options>
TrainerOptimizer wrap(std::vector<torch::optim::OptimizerParamGroup> groups, Options defaults) {
  auto optimizer = std::make_unique<Optimizer<Base>>(std::move(groups), std::move(defaults));
  TrainerOptimizer made;
  made.prepared = optimizer.get();
  Optimizer<Base>* raw = optimizer.get();
  made.zero_grad = [raw] { raw->zero_grad(); };
  made.optimizer = std::move(optimizer);
  return made;
}

double number(const std::string& key, const std::string& text) {
  try {
    std::size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw ConfigError("optim_args: " + key + "='" + text + "' is not a number");
}

torch::optim::SGDOptions sgd_options(const TrainingArguments& args) {
  torch::optim::SGDOptions options(args.learning_rate());
  for (const auto& [key, value] : parse_optim_args(args.optim_args())) {
    if (key == "momentum") options.momentum(number(key, value));
    if (key == "dampening") options.dampening(number(key, value));
    if (key == "nesterov") {
      std::string lower = value;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      options.nesterov(lower == "true" || lower == "1" || lower == "yes");
    }
  }
  return options;
}

}  // namespace

TrainerOptimizer make_trainer_optimizer(const torch::nn::Module& model,
                                        const TrainingArguments& args) {
  switch (args.optim()) {
    case OptimizerName::kSgd: {
      const auto options = sgd_options(args);
      return wrap<torch::optim::SGD>(regroup(model, args, options), options);
    }
    case OptimizerName::kAdafactor: {
      const auto options = AdafactorOptions(args.learning_rate())
                               .scale_parameter(false)
                               .relative_step(false)
                               .warmup_init(false);
      return wrap<Adafactor>(regroup(model, args, options), options);
    }
    case OptimizerName::kAdamWTorchFused:
      return wrap<FusedAdamW>(TrainerLoop::adamw_groups(model, args),
                              torch::optim::AdamWOptions(args.learning_rate()));
    case OptimizerName::kAdamWTorch:
    default:
      return wrap<torch::optim::AdamW>(TrainerLoop::adamw_groups(model, args),
                                       torch::optim::AdamWOptions(args.learning_rate()));
  }
}

}  // namespace accelerate::detail
