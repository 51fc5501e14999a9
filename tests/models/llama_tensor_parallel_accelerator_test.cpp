// Tensor parallelism through the Accelerator (ParallelismConfig's tp_size) on
// real ranks (threads over a FileStore, Gloo): the mesh puts tp innermost,
// prepare() splits a Llama by its plan, the ranks of a tensor-parallel group
// read the same batches, and training with clip_grad_norm_ on every step
// follows the same training without tensor parallelism: tp 2 x dp 2 against
// dp 2, tp 2 x ZeRO-3 (DeepSpeed) and tp 2 x FSDP dp_shard 2 against ZeRO-3
// and FSDP on 4. The clipped norms are compared too: counting a norm
// weight once per tensor-parallel rank, or leaving out the other ranks'
// parts, gives other norms. What is not built yet is refused in one line on
// every rank.
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

#include "accelerate/accelerator.h"
#include "accelerate/deepspeed_plugin.h"
#include "accelerate/errors.h"
#include "accelerate/fsdp_plugin.h"
#include "accelerate/model_saving.h"
#include "accelerate/models/llama.h"
#include "accelerate/tensor_parallel_plan.h"
#include "accelerate/trainer.h"
#include "support/error_message.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "tiny_llama_config.h"

namespace llama_tensor_parallel_accelerator_test {

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

am::LlamaConfig tiny_config() { return accelerate::testing::tiny_llama_config(kVocab, kTokens); }

// One set of initial weights for every rank thread (the default generator
// is shared between them, so each rank copies these).
const std::vector<at::Tensor>& initial_parameters() {
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

am::LlamaForCausalLM initial_model() {
  am::LlamaForCausalLM model(tiny_config());
  at::NoGradGuard no_grad;
  const auto parameters = model->parameters();
  for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(initial_parameters()[i]);
  return model;
}

// 96 windows: 8 random sequences, each 12 times (something to learn in a
// few steps). Every target valid, so that each rank's token mean is a
// sample mean and a global batch split over more ranks averages alike.
accelerate::TensorDataset token_windows() {
  auto generator = at::detail::createCPUGenerator(5);
  const at::Tensor sequences = at::randint(0, kVocab, {8, kTokens}, generator, at::kLong);
  const at::Tensor ids = sequences.repeat({12, 1});
  return accelerate::TensorDataset(ids, ids.clone());
}

AcceleratorOptions with(ParallelismConfig sizes, AcceleratorOptions options = {}) {
  return options.parallelism_config(sizes);
}

AcceleratorOptions zero3() {
  AcceleratorOptions options;
  options.deepspeed_plugin(accelerate::DeepSpeedPlugin().zero_stage(3));
  return options;
}

AcceleratorOptions fsdp() {
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
Curve train(std::shared_ptr<Communicator> comm, const AcceleratorOptions& options, size_t batch,
            const Leg& leg = {}) {
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

std::vector<Curve> curves_of(int world, const AcceleratorOptions& options, size_t batch,
                             const Leg& leg = {}) {
  std::vector<Curve> curves(world);
  run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    curves[rank] = train(comm, options, batch, leg);
  });
  return curves;
}

// The mean over `ranks` of each step's loss: the global batch's loss.
std::vector<double> mean_losses(const std::vector<Curve>& curves, const std::vector<int>& ranks) {
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

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double bound,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), bound * std::abs(want[i])) << what << ", step " << i;
  }
}

TEST(LlamaTensorParallelAccelerator, TheMeshPutsTensorParallelInnermost) {
  run_rank_communicators(4, [](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm, with(ParallelismConfig().tp_size(2).sp_size(2)));
    EXPECT_EQ(accelerator.tensor_parallel().size(), 2);
    EXPECT_EQ(accelerator.tensor_parallel().rank(), rank % 2);
    EXPECT_EQ(accelerator.tensor_parallel().group()->job_rank(0), rank / 2 * 2);
    EXPECT_EQ(accelerator.sequence_parallel().size(), 2);
    EXPECT_EQ(accelerator.sequence_parallel().group()->job_rank(0), rank % 2);
    Accelerator plain(comm);
    EXPECT_FALSE(plain.tensor_parallel().enabled());
  });
}

TEST(LlamaTensorParallelAccelerator, PrepareSplitsTheModelAndAGroupReadsTheSameBatches) {
  std::vector<at::Tensor> first(4);
  std::vector<int64_t> held(4);
  run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm, with(ParallelismConfig().tp_size(2)));
    auto model = initial_model();
    // Seeds that differ between ranks: a tensor-parallel group must still agree.
    accelerate::DataLoader loader(token_windows(),
                                  accelerate::DataLoaderOptions(2).shuffle(true).seed(rank + 1));
    accelerator.prepare(model, loader);
    EXPECT_EQ(model->tensor_parallel().size(), 2);
    for (const auto& p : model->parameters()) held[rank] += p.numel();
    first[rank] = (*loader.begin()).data.clone();
  });
  int64_t whole = 0;
  for (const auto& p : initial_parameters()) whole += p.numel();
  EXPECT_LT(held[0], whole * 6 / 10) << "each rank holds about half";
  EXPECT_TRUE(first[0].equal(first[1]));
  EXPECT_TRUE(first[2].equal(first[3]));
  EXPECT_FALSE(first[0].equal(first[2]));
}

TEST(LlamaTensorParallelAccelerator, Tp2TimesDp2FollowsDp2WithClippedNorms) {
  const auto reference = curves_of(2, {}, 2);
  ASSERT_GT(reference[0].norms.front(), kMaxNorm) << "the steps clip";
  ASSERT_LT(reference[0].losses.back(), 0.9 * reference[0].losses.front()) << "it trains";
  const auto split = curves_of(4, with(ParallelismConfig().tp_size(2)), 2);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string what = "tp 2 x dp 2, rank " + std::to_string(rank);
    expect_close(split[rank].losses, reference[rank / 2].losses, 1e-5, what + ", loss");
    expect_close(split[rank].norms, reference[rank / 2].norms, 1e-5, what + ", norm");
  }
}

// `split` at tp 2 on 4 processes (2 data-parallel) against `reference`
// without tensor parallelism on 4: the same global batch of 8 windows (4 per
// process against 2), the same mean loss, and the same norm on every rank.
void expect_tp2_follows(const AcceleratorOptions& reference, const AcceleratorOptions& split,
                        const std::string& what) {
  const auto whole = curves_of(4, reference, 2);
  const auto parts = curves_of(4, split, 4);
  expect_close(mean_losses(parts, {0, 2}), mean_losses(whole, {0, 1, 2, 3}), 1e-5,
               what + ", mean loss");
  for (int rank = 0; rank < 4; ++rank) {
    expect_close(parts[rank].norms, whole[0].norms, 1e-5,
                 what + ", norm on rank " + std::to_string(rank));
  }
}

TEST(LlamaTensorParallelAccelerator, Tp2TimesZero3OverFourEqualsZero3OverFour) {
  expect_tp2_follows(zero3(), with(ParallelismConfig().tp_size(2), zero3()), "tp 2 x ZeRO-3");
}

TEST(LlamaTensorParallelAccelerator, Tp2TimesFsdpDpShard2EqualsFsdpOverFour) {
  expect_tp2_follows(with(ParallelismConfig().dp_shard_size(4), fsdp()),
                     with(ParallelismConfig().dp_shard_size(2).tp_size(2), fsdp()), "tp 2 x FSDP");
}

// The steps from `from` on.
std::vector<double> after(const std::vector<double>& losses, size_t from) {
  return std::vector<double>(losses.begin() + from, losses.end());
}

void expect_bitwise(const Curve& got, const Curve& want, const std::string& what) {
  ASSERT_EQ(got.whole.size(), want.whole.size()) << what;
  for (size_t i = 0; i < got.whole.size(); ++i) {
    EXPECT_EQ(got.whole[i].first, want.whole[i].first) << what;
    EXPECT_TRUE(got.whole[i].second.equal(want.whole[i].second))
        << what << ": " << got.whole[i].first << " differs from what was saved";
  }
}

TEST(LlamaTensorParallelAccelerator, ACheckpointAtTp2ResumesAtTp1AndTp2) {
  // tp 2 x dp 2 (2 windows a process) against tp 1 x dp 4 (1 a process):
  // the same global batch of 4, in the same order, on 4 processes.
  const auto tp2 = with(ParallelismConfig().tp_size(2));
  const auto uninterrupted = mean_losses(curves_of(4, tp2, 2), {0, 2});
  accelerate::testing::TempDir dir;
  const std::string folder = dir.path() + "/tp2";
  Leg first, second;
  first.steps = second.steps = kSteps / 2;
  first.save_after = second.resume_from = folder;
  const auto saved = curves_of(4, tp2, 2, first);
  expect_close(mean_losses(saved, {0, 2}),
               std::vector<double>(uninterrupted.begin(), uninterrupted.begin() + kSteps / 2), 1e-6,
               "before saving");
  // Whole files: any tp reads them; each rank takes its parts of the
  // weights and of AdamW's moments.
  const auto same = curves_of(4, tp2, 2, second);
  expect_close(mean_losses(same, {0, 2}), after(uninterrupted, kSteps / 2), 1e-6,
               "resumed at tp 2");
  const auto unsplit = curves_of(4, {}, 1, second);
  expect_close(mean_losses(unsplit, {0, 1, 2, 3}), after(uninterrupted, kSteps / 2), 1e-5,
               "resumed at tp 1 x dp 4");
  for (int rank = 0; rank < 4; ++rank) {
    expect_bitwise(same[rank], saved[0], "tp 2, rank " + std::to_string(rank));
    expect_bitwise(unsplit[rank], saved[0], "tp 1, rank " + std::to_string(rank));
  }
  // And back: saved unsplit, resumed split.
  const std::string whole_folder = dir.path() + "/tp1";
  Leg save_whole = first, resume_split = second;
  save_whole.save_after = resume_split.resume_from = whole_folder;
  const auto saved_whole = curves_of(4, {}, 1, save_whole);
  const auto split = curves_of(4, tp2, 2, resume_split);
  expect_close(mean_losses(split, {0, 2}), mean_losses(unsplit, {0, 1, 2, 3}), 1e-5,
               "saved at tp 1, resumed at tp 2");
  expect_bitwise(split[1], saved_whole[0], "saved at tp 1, resumed at tp 2");
}

TEST(LlamaTensorParallelAccelerator, DeepSpeedsAutotpSizeSplitsTheModel) {
  accelerate::testing::TempDir dir;
  const std::string file = dir.path() + "/ds.json";
  std::ofstream(file)
      << R"({"zero_optimization": {"stage": 3}, "tensor_parallel": {"autotp_size": 2}})";
  AcceleratorOptions options;
  options.deepspeed_plugin(accelerate::DeepSpeedPlugin().hf_ds_config(file));
  run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm, options);
    EXPECT_EQ(accelerator.tensor_parallel().size(), 2);
    EXPECT_EQ(accelerator.tensor_parallel().rank(), comm->rank() % 2);
    auto model = initial_model();
    accelerator.prepare(model);
    EXPECT_EQ(model->tensor_parallel().size(), 2);
    // The parallelism sizes in use must say the same.
    EXPECT_EQ(error_of([&] { Accelerator(comm, with(ParallelismConfig(), options)); }),
              file +
                  ": tensor_parallel.autotp_size 2 but parallelism_config's tp_size is 1: give "
                  "the same size in both");
  });
  std::ofstream(file)
      << R"({"zero_optimization": {"stage": 2}, "tensor_parallel": {"autotp_size": 3}})";
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    EXPECT_EQ(error_of([&] { Accelerator(comm, options); }),
              file + ": tensor_parallel.autotp_size 3 does not divide the job's 2 processes");
  });
}

// The batch the saved models are judged on.
at::Tensor judged_batch() { return token_windows().get(0).data.unsqueeze(0); }

// `folder`'s weights in a model built whole.
am::LlamaForCausalLM loaded_whole(const std::string& folder) {
  auto model = initial_model();
  accelerate::load_model(*model, folder);  // strict: every name, whole shapes
  return model;
}

void expect_saves_whole_model(const AcceleratorOptions& options, size_t batch) {
  accelerate::testing::TempDir dir;
  std::vector<double> trained_loss(4);
  run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm, options);
    auto model = initial_model();
    accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                         torch::optim::AdamWOptions(1e-2));
    accelerate::DataLoader loader(token_windows(), accelerate::DataLoaderOptions(batch));
    accelerator.prepare(model, optimizer, loader);
    accelerator.save_model(model, dir.path() + "/initial");
    // get_state_dict is the same whole tensors, on every process.
    for (const auto& [name, tensor] : accelerator.get_state_dict(model)) {
      EXPECT_EQ(tensor.dim(), 2 - (name.find("norm") != std::string::npos)) << name;
    }
    int steps = 0;
    for (auto& example : loader) {
      accelerator.backward(model->loss(example.data, example.target));
      optimizer.step();
      optimizer.zero_grad();
      if (++steps == 3) break;
    }
    accelerator.save_model(model, dir.path() + "/trained");
    // Training goes on from the parts the save put back.
    at::NoGradGuard no_grad;
    trained_loss[rank] = model->loss(judged_batch(), judged_batch()).item<double>();
  });
  const auto initial = loaded_whole(dir.path() + "/initial")->parameters();
  for (size_t i = 0; i < initial.size(); ++i) {
    EXPECT_TRUE(initial[i].equal(initial_parameters()[i])) << "parameter " << i << " bitwise";
  }
  at::NoGradGuard no_grad;
  const double loss =
      loaded_whole(dir.path() + "/trained")->loss(judged_batch(), judged_batch()).item<double>();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NEAR(trained_loss[rank], loss, 1e-6 * loss) << "rank " << rank;
  }
  EXPECT_NE(loss, initial_model()->loss(judged_batch(), judged_batch()).item<double>());
}

TEST(LlamaTensorParallelAccelerator, SaveModelAtTp2WritesTheWholeModel) {
  expect_saves_whole_model(with(ParallelismConfig().tp_size(2)), 2);
}

TEST(LlamaTensorParallelAccelerator, SaveModelAtTp2TimesZero3WritesTheWholeModel) {
  expect_saves_whole_model(with(ParallelismConfig().tp_size(2), zero3()), 2);
}

using LlamaTrainer = accelerate::Trainer<am::LlamaForCausalLM, accelerate::TensorDataset>;

accelerate::TrainingArguments trainer_arguments(const std::string& dir) {
  return accelerate::TrainingArguments()
      .output_dir(dir)
      .per_device_train_batch_size(2)
      .learning_rate(1e-2)
      .max_steps(kSteps)
      .max_grad_norm(kMaxNorm)
      .disable_tqdm(true)
      .save_strategy(accelerate::IntervalStrategy::kNo)
      .seed(3);
}

double trainer_loss(const accelerate::TrainingArguments& args, const AcceleratorOptions& options,
                    std::shared_ptr<Communicator> comm) {
  LlamaTrainer trainer([] { return initial_model(); }, args, token_windows(),
                       [](am::LlamaForCausalLM& model, const accelerate::Example& batch) {
                         return model->loss(batch.data, batch.target);
                       },
                       std::nullopt, options, std::move(comm));
  return trainer.train().training_loss;
}

TEST(LlamaTensorParallelAccelerator, TheTrainerAtTp2TrainsAsOneProcess) {
  accelerate::testing::TempDir dir;
  const auto args = trainer_arguments(dir.path());
  double expected = 0;
  run_rank_communicators(
      1, [&](std::shared_ptr<Communicator> comm) { expected = trainer_loss(args, {}, comm); });
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const auto tp2 = with(ParallelismConfig().tp_size(2));
    EXPECT_NEAR(trainer_loss(args, tp2, comm), expected, 1e-5 * expected);
    // save_state checkpoints at tp (saved whole).
    auto saving = trainer_arguments(dir.path() + "/ddp");
    saving.save_strategy(accelerate::IntervalStrategy::kSteps).save_steps(4);
    EXPECT_NEAR(trainer_loss(saving, tp2, comm), expected, 1e-5 * expected);
  });
  // Under ZeRO sharding at tp (tp 2 x dp 2) they are not built yet: refused
  // before the first step; the weights alone are.
  run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    const auto tp2_zero3 = with(ParallelismConfig().tp_size(2), zero3());
    auto saving = trainer_arguments(dir.path() + "/zero3");
    saving.save_strategy(accelerate::IntervalStrategy::kSteps).save_steps(4);
    EXPECT_EQ(error_of([&] { trainer_loss(saving, tp2_zero3, comm); }),
              "save_state at tp_size 2 with ZeRO stage 3 / FSDP FULL_SHARD is not built yet: the "
              "shards of tensor-parallel parts are not gathered for checkpoints "
              "(docs/tensor-parallel.md)");
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/zero3/checkpoint-4"));
    saving.save_only_model(true);
    EXPECT_GT(trainer_loss(saving, tp2_zero3, comm), 0.0);
  });
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/ddp/checkpoint-4/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/zero3/checkpoint-4/model.safetensors"));
}

// A model of torch::nn layers, which no plan can split.
struct PlainModelImpl : torch::nn::Module {
  PlainModelImpl() : linear(register_module("linear", torch::nn::Linear(4, 4))) {}
  torch::nn::Linear linear;
};
TORCH_MODULE(PlainModel);

TEST(LlamaTensorParallelAccelerator, WhatCannotRunIsRefusedInOneLineOnEveryRank) {
  run_rank_communicators(4, [](std::shared_ptr<Communicator> comm) {
    EXPECT_EQ(
        error_of([&] { Accelerator(comm, with(ParallelismConfig().tp_size(3))); }),
        "parallelism_config: tp_size 3 does not divide the job's 4 processes "
        "(ParallelismConfig::dp_replicate_size, ParallelismConfig::dp_shard_size, "
        "ParallelismConfig::sp_size, ParallelismConfig::tp_size, ParallelismConfig::cp_size)");
    EXPECT_EQ(
        error_of([&] {
          Accelerator(comm, with(ParallelismConfig().dp_shard_size(4).tp_size(2), fsdp()));
        }),
        "parallelism_config: dp_replicate_size 1 x dp_shard_size 4 x tp_size 2 is 8 processes, "
        "but the job has 4 (ParallelismConfig::dp_replicate_size, "
        "ParallelismConfig::dp_shard_size, ParallelismConfig::sp_size, "
        "ParallelismConfig::tp_size, ParallelismConfig::cp_size)");
    AcceleratorOptions zero3_init;
    zero3_init.deepspeed_plugin(accelerate::DeepSpeedPlugin().zero_stage(3).zero3_init_flag(true));
    EXPECT_EQ(
        error_of([&] { Accelerator(comm, with(ParallelismConfig().tp_size(2), zero3_init)); }),
        "tp_size 2 with zero3_init_flag / fsdp_cpu_ram_efficient_loading (weights from the "
        "main process) is not built yet: leave it off with tensor parallelism");

    Accelerator accelerator(comm, with(ParallelismConfig().tp_size(2)));
    PlainModel plain;
    EXPECT_EQ(error_of([&] { accelerator.prepare(plain); }),
              "tp_size 2: the model (" + plain->name() +
                  ") has no tensor-parallel plan of its own: split it with "
                  "accelerate::parallelize_module(model, plan, accelerator.tensor_parallel()) "
                  "before prepare");
    auto model = initial_model();
    accelerator.prepare(model);
    accelerate::testing::TempDir dir;
    Accelerator sharded(comm, with(ParallelismConfig().tp_size(2), zero3()));
    auto sharded_model = initial_model();
    sharded.prepare(sharded_model);
    EXPECT_EQ(error_of([&] { sharded.save_state(dir.path() + "/state"); }),
              "save_state at tp_size 2 with ZeRO stage 3 / FSDP FULL_SHARD is not built yet: the "
              "shards of tensor-parallel parts are not gathered for checkpoints "
              "(docs/tensor-parallel.md)");
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/state")) << "nothing written";

    // A model the program split, under an Accelerator without tensor parallelism.
    Accelerator untouched(comm);
    auto split = initial_model();
    split->parallelize(accelerator.tensor_parallel());
    EXPECT_EQ(error_of([&] { untouched.prepare(split); }),
              "tensor parallelism: the model (" + split->name() +
                  ") is split over tp_size 2 but the Accelerator's tp_size is 1 "
                  "(ParallelismConfig::tp_size, --parallelism_config_tp_size)");
  });
}

}  // namespace llama_tensor_parallel_accelerator_test
