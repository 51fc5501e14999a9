// accelerate::DummyOptim: Accelerate's stand-in for the optimizer a
// DeepSpeed config file's "optimizer" section describes. The program names
// its parameters (and the lr / weight_decay that the file's "auto" values
// take), and prepare() builds the optimizer the file names in its place:
//
//   accelerate::DummyOptim optimizer(model->parameters(), /*lr=*/3e-4, /*weight_decay=*/0.01);
//   accelerate::DummyScheduler scheduler(optimizer, /*total_num_steps=*/1000,
//                                        /*warmup_num_steps=*/100);
//   accelerator.prepare(model, optimizer, loader, scheduler);
//   ... optimizer.step(); scheduler.step(); optimizer.zero_grad();
//
// Types, as DeepSpeed builds them (docs/deepspeed-config.md): "Adam" and
// "AdamW" (any case; AdamW always decouples weight decay, Adam unless
// "adam_w_mode": false), "Adagrad", and LibTorch's "SGD" and "RMSprop";
// DeepSpeed's own kernels (Lamb, 1-bit Adam, Lion, ...) are refused.
// Without a DeepSpeed config file that has an optimizer section, prepare()
// refuses it, as Accelerate does. Until prepared, it holds no optimizer
// (base_optimizer() throws); after, step() and zero_grad() act as
// accelerate::Optimizer's do.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "accelerate/accelerator/optimizer.h"

namespace accelerate {

class DummyOptim : public PreparedOptimizerBase {
 public:
  explicit DummyOptim(std::vector<torch::Tensor> params, double lr = 0.001,
                      double weight_decay = 0.0);

  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr);
  void zero_grad();

  // The optimizer prepare() built; ConfigError before.
  torch::optim::Optimizer& base_optimizer() override;
  bool built() const { return optimizer_ != nullptr; }
  // What the file's section named ("AdamW"), once built.
  const std::string& type() const { return type_; }

  const std::vector<torch::Tensor>& params() const { return params_; }
  double lr() const { return lr_; }
  double weight_decay() const { return weight_decay_; }

  // prepare()'s: the optimizer to stand in for.
  void build(std::unique_ptr<torch::optim::Optimizer> optimizer, std::string type);

 private:
  std::vector<torch::Tensor> params_;
  double lr_, weight_decay_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::string type_;
};

}  // namespace accelerate
