// ZeRO++ hierarchical partitioning (hpZ, DeepSpeed's
// zero_hpz_partition_size): stage 3 whose gathers after the first one of
// each step stay within a group of consecutive processes (a machine's).
// Four thread ranks act as machines of `per_machine` processes, with real
// collectives.
//
// Against plain stage 3 nothing but the route of the parameters changes:
// the gradients are reduce-scattered over the whole job as before (the same
// sums in the same order), and a gather within the group copies the very
// values the job-wide gather brought (each process's secondary copy is cut
// from them). So the weights after K steps are bitwise equal, which these
// tests check with AdamW (any stale copy would move them), gradient
// clipping, accumulation, bf16 autocast, activation checkpointing and
// parameter offloading.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "sharding/hpz_test_support.h"
#include "sharding/parameter_units.h"
#include "sharding/zero_test_model.h"
#include "sharding/zero_test_support.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace hpz_test {

using accelerate::Accelerator;
using accelerate::Communicator;
using accelerate::sharding::ModelShards;
using accelerate::testing::BlockStack;
using accelerate::testing::Call;

constexpr int kWorld = 4;
constexpr int kMicroBatches = 8;  // per rank: 128 samples, batches of 8, 2 epochs

struct Recipe {
  int hpz = 1;  // zero_hpz_partition_size; 1: plain stage 3
  int per_machine = 2;
  int accumulation = 1;
  bool bf16 = false;
  bool offload = false;  // offload_param_device cpu, with its copies on this CPU job
  Call call = Call::kUnitForward;
  bool zero3_init = false;  // built inside zero3_init(): the units start freed
};

// What one rank ends with.
struct Outcome {
  std::vector<at::Tensor> weights;
  ModelShards::GatherCounts counts;  // before the weights were gathered to read them
  std::int64_t unit_buckets = 0;     // the buckets a unit frees between its runs
  int group_size = 0;                // the hpZ group's processes (0: none)
  std::vector<int> group;            // their ranks in the job
};

std::vector<Outcome> train(const Recipe& recipe) {
  accelerate::testing::TempDir dir("hpz-test");
  const std::string file =
      accelerate::testing::write_hpz_config(dir.path() + "/ds.json", recipe.hpz, recipe.offload);
  std::vector<Outcome> outcomes(kWorld);
  accelerate::testing::run_ranks_of_jobs(
      kWorld,
      [&](int rank) {
        return accelerate::testing::machine_rank_job(rank, kWorld, recipe.per_machine);
      },
      [&](int rank, std::shared_ptr<Communicator> comm) {
        auto options = accelerate::testing::hpz_options(file, recipe.offload, recipe.zero3_init);
        options.gradient_accumulation_steps(recipe.accumulation);
        if (recipe.bf16) options.mixed_precision(accelerate::MixedPrecision::kBF16);
        Accelerator accelerator(std::move(comm), options);
        BlockStack model{nullptr};
        {
          std::optional<accelerate::EmptyWeightsGuard> guard;
          if (recipe.zero3_init) guard.emplace(accelerator.zero3_init());
          model = BlockStack(recipe.call);
        }
        accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                             torch::optim::AdamWOptions(0.01));
        accelerate::DataLoader loader(accelerate::testing::zero_data(128),
                                      accelerate::DataLoaderOptions(8));
        accelerator.prepare(model, optimizer, loader);
        accelerate::testing::train_epochs(accelerator, model, optimizer, loader, /*clip=*/1.0);
        Outcome& outcome = outcomes[static_cast<std::size_t>(rank)];
        const ModelShards* shards = accelerate::sharding::unit_shards(*model->blocks[0]);
        ASSERT_NE(shards, nullptr);
        outcome.counts = shards->gather_counts();
        for (std::size_t b = 0; b < shards->reducer().buckets().size(); ++b)
          outcome.unit_buckets += shards->bucket_released(b) ? 1 : 0;
        if (const auto& group = shards->secondary_group()) {
          outcome.group_size = group->world_size();
          for (int member = 0; member < group->world_size(); ++member)
            outcome.group.push_back(group->job_rank(member));
        }
        outcome.weights = accelerate::testing::whole_weights(accelerator, *model);
      });
  return outcomes;
}

void expect_bitwise(const std::vector<Outcome>& got, const std::vector<Outcome>& want) {
  BlockStack initial;
  ASSERT_FALSE(want[0].weights.empty());
  ASSERT_FALSE(at::allclose(want[0].weights[0], initial->parameters()[0]))
      << "training did not move the weights";
  for (std::size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].weights.size(), want[0].weights.size()) << "rank " << r;
    for (std::size_t i = 0; i < got[r].weights.size(); ++i) {
      EXPECT_TRUE(at::equal(got[r].weights[i], want[0].weights[i]))
          << "rank " << r << " tensor " << i << " differs by "
          << (got[r].weights[i] - want[0].weights[i]).abs().max().item<double>();
    }
  }
}

// The gathers each rank ran, for `recipe` (unit_forward, U unit buckets, S
// steps of m micro-batches). The units start whole after prepare (unless
// built inside zero3_init()), so the first forward gathers nothing: 2mS - 1
// gathers of each bucket in all. Plain stage 3 runs them all over the job;
// hpZ runs one a step over the job (the first after the step, which
// refreshes the copies: in step 1 the first backward, or with zero3_init
// the first forward) and the rest within the group.
void expect_gathers(const std::vector<Outcome>& outcomes, const Recipe& recipe) {
  const std::int64_t m = recipe.accumulation;
  const std::int64_t steps = kMicroBatches / m;
  for (std::size_t r = 0; r < outcomes.size(); ++r) {
    const Outcome& outcome = outcomes[r];
    const std::int64_t units = outcome.unit_buckets;
    ASSERT_GT(units, 0) << "rank " << r;
    const std::int64_t all = (2 * m * steps - (recipe.zero3_init ? 0 : 1)) * units;
    if (recipe.hpz == 1) {
      EXPECT_EQ(outcome.counts.primary, all) << "rank " << r;
      EXPECT_EQ(outcome.counts.secondary, 0) << "rank " << r;
      EXPECT_EQ(outcome.group_size, 0) << "rank " << r;
      continue;
    }
    EXPECT_EQ(outcome.counts.primary, steps * units) << "rank " << r;
    EXPECT_EQ(outcome.counts.secondary, all - steps * units) << "rank " << r;
    // The group: rank r's hpz consecutive ranks (its machine's, or part of it).
    const int first = static_cast<int>(r) / recipe.hpz * recipe.hpz;
    std::vector<int> expected;
    for (int k = 0; k < recipe.hpz; ++k) expected.push_back(first + k);
    EXPECT_EQ(outcome.group, expected) << "rank " << r;
  }
}

TEST(Hpz, TwoMachinesOfTwoTrainBitwiseAsPlainStage3WithTheBackwardGathersInTheMachine) {
  Recipe hpz;
  hpz.hpz = 2;
  Recipe plain = hpz;
  plain.hpz = 1;
  const auto with_hpz = train(hpz);
  const auto without = train(plain);
  expect_bitwise(with_hpz, without);
  expect_gathers(with_hpz, hpz);
  expect_gathers(without, plain);
}

// Accumulation: the micro-batches after the first of a step gather within
// the group in forward too (the parameters have not changed); bf16
// autocast computes from the same fp32 weights.
TEST(Hpz, AccumulationAndBf16TrainBitwiseAsPlainStage3) {
  Recipe hpz;
  hpz.hpz = 2;
  hpz.accumulation = 2;
  hpz.bf16 = true;
  Recipe plain = hpz;
  plain.hpz = 1;
  const auto with_hpz = train(hpz);
  expect_bitwise(with_hpz, train(plain));
  expect_gathers(with_hpz, hpz);
}

// zero3_init_flag: the units start freed, every process but the main one
// having built them empty, and their first gather fills the copies.
TEST(Hpz, UnitsBuiltInsideZero3InitTrainBitwiseAsPlainStage3) {
  Recipe hpz;
  hpz.hpz = 2;
  hpz.zero3_init = true;
  Recipe plain = hpz;
  plain.hpz = 1;
  const auto with_hpz = train(hpz);
  expect_bitwise(with_hpz, train(plain));
  expect_gathers(with_hpz, hpz);
}

// One machine of four: groups of two inside it; a group of four is the
// whole job, which is plain stage 3 (no group, no copies).
TEST(Hpz, OnOneMachineGroupsOfTwoTrainBitwiseAndAGroupOfEveryProcessIsPlainStage3) {
  Recipe halves;
  halves.hpz = 2;
  halves.per_machine = 4;
  Recipe plain = halves;
  plain.hpz = 1;
  const auto reference = train(plain);
  const auto with_halves = train(halves);
  expect_bitwise(with_halves, reference);
  expect_gathers(with_halves, halves);
  Recipe whole = halves;
  whole.hpz = 4;
  const auto with_whole = train(whole);
  expect_bitwise(with_whole, reference);
  expect_gathers(with_whole, plain);
}

// Activation checkpointing recomputes each unit's forward during backward
// (another gather, within the group); parameter offloading gathers over the
// job from the host shard and within the group from the device copy.
TEST(Hpz, ActivationCheckpointingAndParameterOffloadTrainBitwiseAsPlainStage3) {
  for (const Call call : {Call::kCheckpoint, Call::kUnitForward}) {
    Recipe hpz;
    hpz.hpz = 2;
    hpz.call = call;
    hpz.offload = call == Call::kUnitForward;
    hpz.accumulation = 2;
    Recipe plain = hpz;
    plain.hpz = 1;
    const auto with_hpz = train(hpz);
    expect_bitwise(with_hpz, train(plain));
    for (const Outcome& outcome : with_hpz) EXPECT_GT(outcome.counts.secondary, 0);
  }
}

// Every process refuses, at construction, a size that does not divide a
// machine's processes, in one line naming the file and the key.
TEST(Hpz, SizesThatDoNotDivideAMachineAreRefusedOnEveryProcess) {
  struct Case {
    int hpz, per_machine;
  };
  for (const Case c : {Case{4, 2}, Case{3, 4}}) {
    accelerate::testing::TempDir dir("hpz-refused");
    const std::string file = accelerate::testing::write_hpz_config(dir.path() + "/ds.json", c.hpz);
    std::vector<std::string> errors(kWorld);
    accelerate::testing::run_ranks_of_jobs(
        kWorld,
        [&](int rank) {
          return accelerate::testing::machine_rank_job(rank, kWorld, c.per_machine);
        },
        [&](int rank, std::shared_ptr<Communicator> comm) {
          try {
            Accelerator accelerator(std::move(comm), accelerate::testing::hpz_options(file));
          } catch (const accelerate::ConfigError& error) {
            errors[static_cast<std::size_t>(rank)] = error.what();
          }
        });
    const std::string per_machine = std::to_string(c.per_machine);
    for (const std::string& error : errors) {
      EXPECT_EQ(error, file + ": zero_optimization.zero_hpz_partition_size " +
                           std::to_string(c.hpz) + " does not divide the " + per_machine +
                           " processes of each machine (the secondary copy of the parameters is "
                           "partitioned within a machine); use a divisor of " +
                           per_machine + ", or 1 for plain stage 3");
    }
  }
}

}  // namespace hpz_test
