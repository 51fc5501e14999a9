// The optimizer and the learning-rate schedule a DeepSpeed config file's
// "optimizer" / "scheduler" sections describe, built as DeepSpeed builds
// them (DummyOptim and DummyScheduler stand in for them until prepare()).
// Internal.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include "accelerate/schedule/deepspeed_schedule.h"
#include "sharding/deepspeed_config.h"

namespace accelerate::sharding {

// `section` resolved (no "auto" left); `source` names the file in errors.
// Adam / AdamW (any case) as DeepSpeed's FusedAdam: AdamW always, and Adam
// unless adam_w_mode is false, decay weights decoupled (LibTorch's AdamW),
// defaults lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0 (0.01 for
// AdamW with torch_adam true, torch.optim.AdamW's); Adagrad (any case);
// LibTorch's SGD and RMSprop (exact names, torch.optim's defaults).
// ConfigError for another type, a parameter the type does not take, or a
// value of the wrong kind.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const ResolvedParamSection& section,
                                                        std::vector<at::Tensor> params,
                                                        const std::string& source);

// The schedule's options from its resolved section (ConfigError as above;
// OneCycle and LRRangeTest are refused).
DeepSpeedScheduleOptions schedule_options(const ResolvedParamSection& section,
                                          const std::string& source);

}  // namespace accelerate::sharding
