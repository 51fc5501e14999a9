// What the tensor-parallel Accelerator tests share: a tiny Llama every
// rank builds alike, token windows, the Accelerator settings, and a training
// loop (AdamW, clip_grad_norm_ every step) that can stop to save_state or
// start from load_state, run on thread ranks.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/common/errors.h"
#include "accelerate/models/llama.h"
#include "accelerate/nn/tensor_parallel_plan.h"
#include "accelerate/sharding/deepspeed_plugin.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "accelerate/trainer/trainer.h"
#include "support/error_message.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "tiny_llama_config.h"

namespace llama_tensor_parallel_training {

namespace am = accelerate::models;
using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::ParallelismConfig;
using accelerate::testing::error_of;
using accelerate::testing::run_rank_communicators;

constexpr int64_t kVocab = 48, kTokens = 16;
constexpr int kSteps = 12;
// Small enough that every step clips (the norms start near 2).
constexpr double kMaxNorm = 0.25;

inline am::LlamaConfig tiny_config() {
  return accelerate::testing::tiny_llama_config(kVocab, kTokens);
}

// One set of initial weights for every rank thread (the default generator
// is shared between them, so each rank copies these).
inline const std::vector<at::Tensor>& initial_parameters() {
  static const std::vector<at::Tensor> initial = [] {
    torch::manual_seed(21);
    std::vector<at::Tensor> parameters;
    for (const auto& p : am::LlamaForCausalLM(tiny_config())->parameters()) {
      parameters.push_back(p.detach().clone());
    }
    return parameters;
  }();
  return initial;
}

inline am::LlamaForCausalLM initial_model() {
  am::LlamaForCausalLM model(tiny_config());
  at::NoGradGuard no_grad;
  const auto parameters = model->parameters();
  for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(initial_parameters()[i]);
  return model;
}

// 96 windows: 8 random sequences, each 12 times (something to learn in a
// few steps). Every target valid, so that each rank's token mean is a
// sample mean and a global batch split over more ranks averages alike.
inline accelerate::TensorDataset token_windows() {
  auto generator = at::detail::createCPUGenerator(5);
  const at::Tensor sequences = at::randint(0, kVocab, {8, kTokens}, generator, at::kLong);
  const at::Tensor ids = sequences.repeat({12, 1});
  return accelerate::TensorDataset(ids, ids.clone());
}

inline AcceleratorOptions with(ParallelismConfig sizes, AcceleratorOptions options = {}) {
  return options.parallelism_config(sizes);
}

inline AcceleratorOptions zero3() {
  AcceleratorOptions options;
  options.deepspeed_plugin(accelerate::DeepSpeedPlugin().zero_stage(3));
  return options;
}

inline AcceleratorOptions fsdp() {
  AcceleratorOptions options;
  options.fsdp_plugin(accelerate::FullyShardedDataParallelPlugin());
  return options;
}

struct Curve {
  std::vector<double> losses;  // this rank's
  std::vector<double> norms;   // clip_grad_norm_'s, before clipping
  // get_state_dict's whole weights: after load_state, or before save_state.
  std::vector<std::pair<std::string, at::Tensor>> whole;
};

// A run that stops to save, or starts from a saved state.
struct Leg {
  int steps = kSteps;
  std::optional<std::string> save_after;   // folder: save_state after the steps
  std::optional<std::string> resume_from;  // folder: load_state before them
};

// AdamW steps, each clipped to kMaxNorm, `batch` windows per process.
inline Curve train(std::shared_ptr<Communicator> comm, const AcceleratorOptions& options,
                   size_t batch, const Leg& leg = {}) {
  Accelerator accelerator(std::move(comm), options);
  auto model = initial_model();
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(1e-2));
  accelerate::DataLoader loader(token_windows(), accelerate::DataLoaderOptions(batch));
  accelerator.prepare(model, optimizer, loader);
  Curve curve;
  if (leg.resume_from) {
    accelerator.load_state(*leg.resume_from);
    curve.whole = accelerator.get_state_dict(model);
  }
  for (auto& example : loader) {
    const at::Tensor loss = model->loss(example.data, example.target);
    accelerator.backward(loss);
    curve.norms.push_back(accelerator.clip_grad_norm_(model->parameters(), kMaxNorm));
    optimizer.step();
    optimizer.zero_grad();
    curve.losses.push_back(loss.item<double>());
    if (curve.losses.size() == static_cast<size_t>(leg.steps)) break;
  }
  if (leg.save_after) {
    curve.whole = accelerator.get_state_dict(model);
    accelerator.save_state(*leg.save_after);
  }
  return curve;
}

inline std::vector<Curve> curves_of(int world, const AcceleratorOptions& options, size_t batch,
                                    const Leg& leg = {}) {
  std::vector<Curve> curves(world);
  run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    curves[rank] = train(comm, options, batch, leg);
  });
  return curves;
}

// The mean over `ranks` of each step's loss: the global batch's loss.
inline std::vector<double> mean_losses(const std::vector<Curve>& curves,
                                       const std::vector<int>& ranks) {
  const size_t steps = curves[ranks.front()].losses.size();
  std::vector<double> mean(steps, 0.0);
  for (int rank : ranks) {
    EXPECT_EQ(curves[rank].losses.size(), steps) << "rank " << rank;
    if (curves[rank].losses.size() != steps) return {};
    for (size_t step = 0; step < steps; ++step) {
      mean[step] += curves[rank].losses[step] / ranks.size();
    }
  }
  return mean;
}

inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double bound, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), bound * std::abs(want[i])) << what << ", step " << i;
  }
}

// The losses from step `from` on.
inline std::vector<double> losses_from(const std::vector<double>& losses, size_t from) {
  return std::vector<double>(losses.begin() + from, losses.end());
}

// `got`'s whole weights are bitwise those `want` saved.
inline void expect_weights_bitwise(const Curve& got, const Curve& want, const std::string& what) {
  ASSERT_EQ(got.whole.size(), want.whole.size()) << what;
  for (size_t i = 0; i < got.whole.size(); ++i) {
    EXPECT_EQ(got.whole[i].first, want.whole[i].first) << what;
    EXPECT_TRUE(got.whole[i].second.equal(want.whole[i].second))
        << what << ": " << got.whole[i].first << " differs from what was saved";
  }
}

// A run at tp 2 on 4 processes (`options`, 2 windows a process: a global
// batch of 4) saved into `folder` halfway: what a resume at any layout must
// follow (the uninterrupted run's later losses) and start from (the saving
// run's curves), and the legs that save and resume.
struct SavedHalfway {
  std::vector<double> after;  // the uninterrupted mean losses after the save
  std::vector<Curve> saved;
  Leg save, resume;
};

inline SavedHalfway save_halfway(const AcceleratorOptions& options, const std::string& folder) {
  const auto uninterrupted = mean_losses(curves_of(4, options, 2), {0, 2});
  SavedHalfway run;
  run.save.steps = run.resume.steps = kSteps / 2;
  run.save.save_after = run.resume.resume_from = folder;
  run.saved = curves_of(4, options, 2, run.save);
  expect_close(mean_losses(run.saved, {0, 2}),
               std::vector<double>(uninterrupted.begin(), uninterrupted.begin() + kSteps / 2), 1e-6,
               "before saving");
  run.after = losses_from(uninterrupted, kSteps / 2);
  return run;
}

}  // namespace llama_tensor_parallel_training
