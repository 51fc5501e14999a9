// Hybrid sharding (FSDP's HYBRID_SHARD and _HYBRID_SHARD_ZERO2): each
// machine's processes shard the model among themselves and the machines
// replicate it. Four thread ranks act as machines of `per_machine`
// processes (as `accelerate launch` numbers them), with real collectives.
//
// Against FULL_SHARD on the same four processes only the order of the
// gradient sums differs: full sharding adds ((g0 + g1) + g2) + g3, hybrid
// (g0 + g1) + (g2 + g3). Each averaged element then differs by at most two
// fp32 roundings of sums of four terms (|d| <= 2 * 2^-24 * sum|g_i| / 4),
// the SGD step moves the weights by lr * d, and over the 4 steps below with
// lr 0.01 and gradients clipped to norm 1 that is under 4 * 0.01 * 2^-23 ~ 5e-9
// before the dynamics amplify it (measured: at most 3.7e-9); the tolerance,
// 1e-5, leaves 2000x for that. Without the replicas' sum (each group
// stepping on its own half of the batch) the weights differ by 1e-4 to
// 4e-4, well outside it.
// Where the sums run in the same order the results are bitwise equal.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "sharding/zero_test_model.h"
#include "sharding/zero_test_support.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace hybrid_shard_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::FsdpAutoWrapPolicy;
using accelerate::FsdpShardingStrategy;
using accelerate::FullyShardedDataParallelPlugin;
using accelerate::JobState;
using accelerate::testing::BlockStack;
using accelerate::testing::zero_data;

constexpr int kWorld = 4;

struct Recipe {
  std::optional<FsdpShardingStrategy> strategy;  // none: data parallelism
  int per_machine = 2;                           // processes per machine
  double clip = 1.0;                             // plain SGD on this model diverges without it
  int accumulation = 1;
  // Accelerate 1.x's sizes (PARALLELISM_CONFIG_*), as `accelerate launch`
  // gives them: dp_replicate_size x dp_shard_size; 0: not given.
  int dp_replicate = 0;
  int dp_shard = 0;
  bool sizes_in_options = false;  // AcceleratorOptions::parallelism_config, not the variables
  bool bf16 = false;
  // FSDP's cpu_offload, with its host copies made on this CPU job too
  // (ACCELERATE_OFFLOAD_ON_CPU_JOB).
  bool offload = false;
};

// Rank r of the four, on machine r / per_machine.
JobState job_of(int rank, int per_machine) {
  JobState job = accelerate::testing::thread_rank_job(rank, kWorld);
  job.node_rank = rank / per_machine;
  job.num_nodes = kWorld / per_machine;
  job.local_rank = rank % per_machine;
  job.local_world_size = per_machine;
  return job;
}

AcceleratorOptions options_for(const Recipe& recipe) {
  AcceleratorOptions options;
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  options.gradient_accumulation_steps(recipe.accumulation);
  accelerate::Environment env;
  if (recipe.dp_shard > 0 && recipe.sizes_in_options) {
    options.parallelism_config(accelerate::ParallelismConfig()
                                   .dp_replicate_size(recipe.dp_replicate)
                                   .dp_shard_size(recipe.dp_shard));
  } else if (recipe.dp_shard > 0) {
    env["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true";
    env["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] = std::to_string(recipe.dp_replicate);
    env["PARALLELISM_CONFIG_DP_SHARD_SIZE"] = std::to_string(recipe.dp_shard);
  }
  if (recipe.offload) env["ACCELERATE_OFFLOAD_ON_CPU_JOB"] = "true";
  if (!env.empty()) options.environment(env);
  if (recipe.bf16) options.mixed_precision(accelerate::MixedPrecision::kBF16);
  if (recipe.strategy) {
    options.fsdp_plugin(FullyShardedDataParallelPlugin()
                            .sharding_strategy(*recipe.strategy)
                            .auto_wrap_policy(FsdpAutoWrapPolicy::kTransformerBasedWrap)
                            .transformer_cls_names_to_wrap({"ResidualBlock"})
                            .cpu_offload(recipe.offload));
  }
  return options;
}

// Each rank's whole weights after training.
std::vector<std::vector<at::Tensor>> train(const Recipe& recipe) {
  std::vector<std::vector<at::Tensor>> weights(kWorld);
  accelerate::testing::run_ranks_of_jobs(
      kWorld, [&](int rank) { return job_of(rank, recipe.per_machine); },
      [&](int rank, std::shared_ptr<Communicator> comm) {
        Accelerator accelerator(std::move(comm), options_for(recipe));
        BlockStack model;
        accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                           torch::optim::SGDOptions(0.01));
        accelerate::DataLoader loader(zero_data(64), accelerate::DataLoaderOptions(8));
        accelerator.prepare(model, optimizer, loader);
        if (recipe.strategy) {
          EXPECT_EQ(accelerate::testing::optimizer_steps_model_memory(optimizer, *model),
                    !recipe.offload)
              << "rank " << rank;
        }
        accelerate::testing::train_epochs(accelerator, model, optimizer, loader, recipe.clip);
        weights[static_cast<std::size_t>(rank)] =
            accelerate::testing::whole_weights(accelerator, *model);
      });
  return weights;
}

// `tolerance` 0: bitwise. Every rank of `got` against rank 0 of `want`.
void expect_close(const std::vector<std::vector<at::Tensor>>& got,
                  const std::vector<std::vector<at::Tensor>>& want, double tolerance) {
  BlockStack initial;
  ASSERT_FALSE(want[0].empty());
  ASSERT_FALSE(at::allclose(want[0][0], initial->parameters()[0]))
      << "training did not move the weights";
  for (std::size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), want[0].size()) << "rank " << r;
    for (std::size_t i = 0; i < got[r].size(); ++i) {
      const double difference = (got[r][i] - want[0][i]).abs().max().item<double>();
      if (tolerance == 0) {
        EXPECT_TRUE(at::equal(got[r][i], want[0][i]))
            << "rank " << r << " tensor " << i << ": " << difference;
      } else {
        EXPECT_LE(difference, tolerance) << "rank " << r << " tensor " << i;
      }
    }
  }
}

// Every rank of `weights` holds rank 0's, bitwise: the replicas agree.
void expect_replicas_agree(const std::vector<std::vector<at::Tensor>>& weights) {
  expect_close(weights, weights, 0);
}

TEST(HybridShard, TwoMachinesOfTwoTrainAsFullShardAndDataParallelismOnFour) {
  Recipe hybrid{FsdpShardingStrategy::kHybridShard};
  const auto hybrid_weights = train(hybrid);
  expect_replicas_agree(hybrid_weights);
  expect_close(hybrid_weights, train({FsdpShardingStrategy::kFullShard}), 1e-5);
  expect_close(hybrid_weights, train({std::nullopt}), 1e-5);
}

TEST(HybridShard, HybridShardZero2TrainsAsShardGradOpWithClippingAndAccumulation) {
  Recipe hybrid{FsdpShardingStrategy::kHybridShardZero2};
  hybrid.clip = 0.5;  // the global norm: over one group's shards, which every group holds alike
  hybrid.accumulation = 2;
  const auto hybrid_weights = train(hybrid);
  expect_replicas_agree(hybrid_weights);
  Recipe full = hybrid;
  full.strategy = FsdpShardingStrategy::kShardGradOp;
  expect_close(hybrid_weights, train(full), 1e-5);
}

TEST(HybridShard, OnOneMachineItIsFullShardAndWithOneProcessPerMachineDataParallelism) {
  // Both sums then run in the same order as the strategy they become: bitwise.
  Recipe one_machine{FsdpShardingStrategy::kHybridShard, /*per_machine=*/4};
  expect_close(train(one_machine), train({FsdpShardingStrategy::kFullShard, 4}), 0);
  Recipe one_per_machine{FsdpShardingStrategy::kHybridShard, /*per_machine=*/1};
  expect_close(train(one_per_machine), train({std::nullopt, 1}), 0);
}

// bf16 autocast: the same computations as full sharding but for the order
// of the gradient sums (fp32 gradients), so the same bound. Offloading: the
// optimizer steps host copies of the same shards with the same kernels,
// bitwise what the on-device step gives.
TEST(HybridShard, Bf16AndCpuOffloadTrainAsWithoutHybridShardingAndWithoutOffload) {
  Recipe bf16{FsdpShardingStrategy::kHybridShard};
  bf16.bf16 = true;
  const auto hybrid_bf16 = train(bf16);
  expect_replicas_agree(hybrid_bf16);
  Recipe full_bf16 = bf16;
  full_bf16.strategy = FsdpShardingStrategy::kFullShard;
  expect_close(hybrid_bf16, train(full_bf16), 1e-5);

  Recipe offload{FsdpShardingStrategy::kHybridShard};
  offload.offload = true;
  expect_close(train(offload), train({FsdpShardingStrategy::kHybridShard}), 0);
}

// dp_replicate_size 2 x dp_shard_size 2 makes the same groups on one
// machine of four as HYBRID_SHARD on two machines of two: the same sums in
// the same order (each pair's, then the two pairs'), so bitwise the same.
TEST(HybridShard, ParallelismSizesTwoByTwoAreHybridShardingOnOneMachine) {
  Recipe sizes{FsdpShardingStrategy::kFullShard, /*per_machine=*/4};
  sizes.dp_replicate = 2;
  sizes.dp_shard = 2;
  const auto by_sizes = train(sizes);
  expect_replicas_agree(by_sizes);
  expect_close(by_sizes, train({FsdpShardingStrategy::kHybridShard, 2}), 0);
  // The same sizes from the program's own options.
  sizes.sizes_in_options = true;
  expect_close(train(sizes), by_sizes, 0);
}

TEST(HybridShard, ParallelismSizesThatDoNotFitTheJobAreRefusedOnEveryProcess) {
  std::vector<std::string> errors(kWorld);
  accelerate::testing::run_ranks_of_jobs(
      kWorld, [](int rank) { return job_of(rank, 4); },
      [&](int rank, std::shared_ptr<Communicator> comm) {
        try {
          Accelerator accelerator(
              std::move(comm),
              AcceleratorOptions()
                  .fsdp_plugin(FullyShardedDataParallelPlugin())
                  .parallelism_config(
                      accelerate::ParallelismConfig().dp_replicate_size(3).dp_shard_size(2)));
        } catch (const accelerate::ConfigError& error) {
          errors[static_cast<std::size_t>(rank)] = error.what();
        }
      });
  for (const std::string& error : errors) {
    EXPECT_EQ(error,
              "parallelism_config: dp_replicate_size 3 x dp_shard_size 2 is 6 processes, but the "
              "job has 4 (ParallelismConfig::dp_replicate_size, ParallelismConfig::dp_shard_size, "
              "ParallelismConfig::sp_size, ParallelismConfig::tp_size, "
              "ParallelismConfig::cp_size)");
  }
}

TEST(HybridShard, SaveModelWritesTheWholeModelOnce) {
  accelerate::testing::TempDir folder("hybrid-shard-test");
  std::vector<std::vector<at::Tensor>> weights(kWorld);
  accelerate::testing::run_ranks_of_jobs(
      kWorld, [](int rank) { return job_of(rank, 2); },
      [&](int rank, std::shared_ptr<Communicator> comm) {
        Accelerator accelerator(std::move(comm), options_for({FsdpShardingStrategy::kHybridShard}));
        BlockStack model;
        accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                           torch::optim::SGDOptions(0.01));
        accelerator.prepare(model, optimizer);
        accelerator.save_model(*model, folder.path() + "/model");
        weights[static_cast<std::size_t>(rank)] =
            accelerate::testing::whole_weights(accelerator, *model);
      });
  const accelerate::NamedTensors saved =
      accelerate::load_safetensors(folder.path() + "/model/model.safetensors");
  ASSERT_EQ(saved.size(), weights[0].size());
  for (std::size_t i = 0; i < saved.size(); ++i)
    EXPECT_TRUE(at::equal(saved[i].second, weights[0][i]));
}

}  // namespace hybrid_shard_test
