// Sequence parallelism through the Accelerator (ParallelismConfig's sp_size)
// on rank threads: the groups it forms, the batches its prepared loaders
// give, and training a small causal language model (Ulysses attention
// blocks, token-weighted loss) with the sequence split against the same
// training unsplit, with data parallelism and ZeRO-3, and a checkpoint
// saved split and resumed unsplit.
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/nn/sequence_parallel.h"
#include "accelerate/sharding/deepspeed_plugin.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "accelerate/sharding/unit_forward.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::ParallelismConfig;
using accelerate::SequenceParallel;

constexpr int64_t kVocab = 11, kWidth = 16, kHeads = 4, kTokens = 16;

// A pre-norm causal attention block over this rank's tokens.
struct SpBlockImpl : torch::nn::Module {
  SpBlockImpl()
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})))),
        qkv(register_module("qkv", torch::nn::Linear(kWidth, 3 * kWidth))),
        proj(register_module("proj", torch::nn::Linear(kWidth, kWidth))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t batch = x.size(0), tokens = x.size(1);
    auto parts =
        qkv(norm(x)).view({batch, tokens, 3, kHeads, kWidth / kHeads}).permute({2, 0, 3, 1, 4});
    auto y = accelerate::ulysses_attention(parts[0], parts[1], parts[2], *sp);
    return x + proj(y.transpose(1, 2).reshape({batch, tokens, kWidth}));
  }
  const SequenceParallel* sp = nullptr;
  torch::nn::LayerNorm norm;
  torch::nn::Linear qkv, proj;
};
TORCH_MODULE(SpBlock);

struct TinyLmImpl : torch::nn::Module {
  TinyLmImpl()
      : wte(register_module("wte", torch::nn::Embedding(kVocab, kWidth))),
        wpe(register_module("wpe", torch::nn::Embedding(kTokens, kWidth))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        head(register_module("head", torch::nn::Linear(kWidth, kVocab))) {
    for (int i = 0; i < 2; ++i) blocks->push_back(SpBlock());
    // Same weights on every rank thread (the default generator is shared).
    auto generator = at::detail::createCPUGenerator(29);
    torch::NoGradGuard no_grad;
    for (auto& parameter : parameters()) {
      parameter.copy_(at::randn(parameter.sizes(), generator) * 0.2);
    }
  }
  // The group's token-mean loss of predicting `targets` (already shifted;
  // -100: no loss) from `tokens`, both [B, T]; each rank takes its slice.
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets,
                     const SequenceParallel& sp) {
    const auto ids = accelerate::slice_tokens(tokens, sp);
    const auto labels = accelerate::slice_tokens(targets, sp);
    const int64_t t = ids.size(1);
    auto h = wte(ids) + wpe(torch::arange(sp.rank() * t, (sp.rank() + 1) * t, torch::kLong));
    for (const auto& module : *blocks) {
      auto block = std::dynamic_pointer_cast<SpBlockImpl>(module);
      block->sp = &sp;
      h = accelerate::unit_forward(block, h);
    }
    const auto sum = torch::nn::functional::cross_entropy(
        head(h).reshape({-1, kVocab}), labels.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
    return accelerate::sequence_parallel_loss(sum, (labels != -100).sum(), sp);
  }
  torch::nn::Embedding wte, wpe;
  torch::nn::ModuleList blocks;
  torch::nn::Linear head;
};
TORCH_MODULE(TinyLm);

// Windows of a token stream, targets shifted by one; `masked`: about a fifth
// of the targets -100 (uneven valid tokens between the slices).
accelerate::TensorDataset token_windows(int64_t windows, bool masked = true) {
  auto generator = at::detail::createCPUGenerator(5);
  const auto stream = at::randint(0, kVocab, {windows, kTokens + 1}, generator);
  auto targets = stream.narrow(1, 1, kTokens).clone();
  const auto dropped = at::rand({windows, kTokens}, generator) < 0.2;
  if (masked) targets.masked_fill_(dropped, -100);
  return accelerate::TensorDataset(stream.narrow(1, 0, kTokens).clone(), targets);
}

AcceleratorOptions with_sp(int sp, AcceleratorOptions options = {}) {
  return options.parallelism_config(ParallelismConfig().sp_size(sp));
}

struct TrainingRun {
  int first_step = 0;
  int last_step = 50;
  std::optional<std::string> save_after;   // folder: save_state after last_step
  std::optional<std::string> resume_from;  // folder: load_state before first_step
  bool masked = true;                      // token_windows' argument
};

// Trains TinyLm with Adam; the loss of every step, as this rank reports it.
std::vector<double> train(std::shared_ptr<Communicator> comm, const AcceleratorOptions& options,
                          size_t batch, const TrainingRun& run = {}) {
  Accelerator accelerator(std::move(comm), options);
  TinyLm model;
  accelerate::Optimizer<torch::optim::Adam> optimizer(model->parameters(),
                                                      torch::optim::AdamOptions(1e-2));
  accelerate::DataLoader loader(token_windows(64, run.masked),
                                accelerate::DataLoaderOptions(batch));
  accelerator.prepare(model, optimizer, loader);
  // The loader resumes where the saved one stopped.
  if (run.resume_from) accelerator.load_state(*run.resume_from);
  std::vector<double> losses;
  int step = run.first_step;
  while (step < run.last_step) {
    for (auto& example : loader) {
      const auto loss = model->loss(example.data, example.target, accelerator.sequence_parallel());
      accelerator.backward(loss);
      optimizer.step();
      optimizer.zero_grad();
      losses.push_back(loss.item<double>());
      // Stop before the loader yields another batch: the saved position is
      // the next batch to train on.
      if (++step == run.last_step) break;
    }
  }
  if (run.save_after) accelerator.save_state(*run.save_after);
  return losses;
}

void expect_same_losses(const std::vector<double>& got, const std::vector<double>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), 1e-5 * std::abs(want[i])) << what << ", step " << i;
  }
}

// Each rank's losses, by rank.
std::vector<std::vector<double>> losses_of(int world, const AcceleratorOptions& options,
                                           size_t batch, const TrainingRun& run = {}) {
  std::vector<std::vector<double>> losses(world);
  accelerate::testing::run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    losses[rank] = train(comm, options, batch, run);
  });
  return losses;
}

TEST(SequenceParallelTraining, TheAcceleratorFormsGroupsOfConsecutiveRanks) {
  accelerate::testing::run_rank_communicators(4, [](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm, with_sp(2));
    const SequenceParallel& sp = accelerator.sequence_parallel();
    EXPECT_EQ(sp.size(), 2);
    EXPECT_EQ(sp.rank(), rank % 2);
    EXPECT_EQ(sp.group()->job_rank(0), rank / 2 * 2);
    Accelerator plain(comm);
    EXPECT_FALSE(plain.sequence_parallel().enabled());
  });
}

TEST(SequenceParallelTraining, RanksOfAGroupReadTheSameBatchesOtherGroupsOthers) {
  std::vector<torch::Tensor> first(4);
  accelerate::testing::run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm, with_sp(2));
    // Seeds that differ between ranks: the group must still agree.
    accelerate::DataLoader loader(token_windows(16),
                                  accelerate::DataLoaderOptions(2).shuffle(true).seed(rank + 1));
    accelerator.prepare(loader);
    first[rank] = (*loader.begin()).data.clone();
  });
  EXPECT_TRUE(first[0].equal(first[1]));
  EXPECT_TRUE(first[2].equal(first[3]));
  EXPECT_FALSE(first[0].equal(first[2]));
}

TEST(SequenceParallelTraining, GatherForMetricsHoldsEverySampleOnce) {
  // 10 windows over 2 groups of 2, batch 2 per group: the last batch is
  // padded by even_batches; the gathered epoch is the dataset, once.
  std::vector<torch::Tensor> epochs(4);
  accelerate::testing::run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm, with_sp(2));
    accelerate::DataLoader loader(token_windows(10), accelerate::DataLoaderOptions(2));
    accelerator.prepare(loader);
    std::vector<torch::Tensor> gathered;
    for (auto& example : loader) gathered.push_back(accelerator.gather_for_metrics(example.data));
    epochs[rank] = torch::cat(gathered);
  });
  // Each window as one number (its tokens as base-kVocab digits), sorted:
  // the windows as a multiset.
  const auto keys = [](const torch::Tensor& rows) {
    const auto digits = torch::pow(torch::full({kTokens}, kVocab, torch::kLong),
                                   torch::arange(kTokens, torch::kLong));
    return std::get<0>((rows * digits).sum(1).sort());
  };
  const auto windows = token_windows(10);
  std::vector<torch::Tensor> rows;
  for (size_t i = 0; i < windows.size(); ++i) rows.push_back(windows.get(i).data);
  const auto dataset = torch::stack(rows);
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_EQ(epochs[rank].size(0), 10) << "rank " << rank;
    EXPECT_TRUE(keys(epochs[rank]).equal(keys(dataset))) << "rank " << rank;
  }
}

TEST(SequenceParallelTraining, SpTwoReproducesOneRanksLossesOver50Steps) {
  const auto reference = losses_of(1, {}, 4)[0];
  ASSERT_LT(reference.back(), 0.9 * reference.front());  // it trained
  const auto split = losses_of(2, with_sp(2), 4);
  expect_same_losses(split[0], reference, "sp rank 0");
  expect_same_losses(split[1], reference, "sp rank 1");
}

TEST(SequenceParallelTraining, SpTwoTimesZero3OverFourRanksEqualsZero3OverTwo) {
  AcceleratorOptions zero3;
  zero3.deepspeed_plugin(accelerate::DeepSpeedPlugin().zero_stage(3));
  const auto reference = losses_of(2, zero3, 2);
  const auto split = losses_of(4, with_sp(2, zero3), 2);
  for (int rank = 0; rank < 4; ++rank) {
    expect_same_losses(split[rank], reference[rank / 2], "rank " + std::to_string(rank));
  }
}

TEST(SequenceParallelTraining, FsdpShardsOverDpShardTimesSpRanks) {
  // dp_shard_size 2 x sp_size 2 on 4 ranks (one shard group of all 4)
  // against dp_shard_size 2 on 2: the same global batch, the same losses.
  AcceleratorOptions fsdp;
  fsdp.fsdp_plugin(accelerate::FullyShardedDataParallelPlugin());
  AcceleratorOptions two = fsdp, four = fsdp;
  two.parallelism_config(ParallelismConfig().dp_shard_size(2));
  four.parallelism_config(ParallelismConfig().dp_shard_size(2).sp_size(2));
  const auto reference = losses_of(2, two, 2);
  const auto split = losses_of(4, four, 2);
  for (int rank = 0; rank < 4; ++rank) {
    expect_same_losses(split[rank], reference[rank / 2], "rank " + std::to_string(rank));
  }
}

TEST(SequenceParallelTraining, ACheckpointSavedWithSpTwoResumesWithSpOne) {
  // Checkpoints need the same world size: sp 2 x dp 1 (batch 4 per group)
  // resumes as sp 1 x dp 2 (batch 2 per rank), the same global batch. With
  // every target valid both train on the same token mean.
  accelerate::testing::TempDir dir;
  const std::string folder = dir.path() + "/sp2";
  TrainingRun whole;
  whole.masked = false;
  const auto uninterrupted = losses_of(2, {}, 2, whole);
  TrainingRun first = whole, second = whole;
  first.last_step = 25;
  first.save_after = folder;
  second.first_step = 25;
  second.resume_from = folder;
  const auto before = losses_of(2, with_sp(2), 4, first);
  const auto after = losses_of(2, {}, 2, second);
  std::vector<double> mean_before;
  for (int step = 0; step < 25; ++step) {
    mean_before.push_back((uninterrupted[0][step] + uninterrupted[1][step]) / 2);
  }
  expect_same_losses(before[0], mean_before, "sp 2, before saving");
  for (int rank = 0; rank < 2; ++rank) {
    expect_same_losses(
        after[rank],
        std::vector<double>(uninterrupted[rank].begin() + 25, uninterrupted[rank].end()),
        "resumed with sp 1, rank " + std::to_string(rank));
  }
}

}  // namespace
