// save_state / load_state with ZeRO++ hpZ: a checkpoint holds the primary
// shards only (the secondary copies are a cache of the gathered weights),
// so one saved with hpZ resumes without it and one saved without resumes
// with it, bitwise where the uninterrupted run ends. A load also makes the
// copies stale: a run that gathered (and so kept copies) before loading
// must not gather the old weights back from them afterwards, which is how
// DeepSpeed's hpZ once began from a too-high loss after a load. Four thread
// ranks act as two machines of two.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "sharding/hpz_test_support.h"
#include "sharding/parameter_units.h"
#include "sharding/zero_test_model.h"
#include "sharding/zero_test_support.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace hpz_checkpoint_test {

using accelerate::Accelerator;
using accelerate::Communicator;
using accelerate::testing::BlockStack;

constexpr int kWorld = 4;

struct HpzRun {
  int hpz = 1;          // zero_hpz_partition_size
  int steps = 6;        // in all; a resumed run skips the saved ones
  int save_after = -1;  // save_state after this many steps (-1: never)
  bool resume = false;  // load_state(checkpoint) first, after a forward pass
  std::string checkpoint;
};

// Each rank's whole weights at the end of `run`, and whether the hpZ copies
// took part (a gather within the group ran).
struct Result {
  std::vector<std::vector<at::Tensor>> weights;
  bool gathered_in_group = true;
};

Result train(const HpzRun& run, const std::string& folder) {
  const std::string file = accelerate::testing::write_hpz_config(
      folder + "/ds" + std::to_string(run.hpz) + ".json", run.hpz);
  Result result;
  result.weights.resize(kWorld);
  std::vector<char> in_group(kWorld, 0);
  accelerate::testing::run_ranks_of_jobs(
      kWorld, [](int rank) { return accelerate::testing::machine_rank_job(rank, kWorld, 2); },
      [&](int rank, std::shared_ptr<Communicator> comm) {
        Accelerator accelerator(std::move(comm), accelerate::testing::hpz_options(file));
        BlockStack model;
        accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                             torch::optim::AdamWOptions(0.01));
        accelerate::DataLoader loader(accelerate::testing::zero_data(240),
                                      accelerate::DataLoaderOptions(4));
        accelerator.prepare(model, optimizer, loader);
        int step = 0;
        if (run.resume) {
          // Two forward passes: the first frees the units (they start
          // whole), the second gathers them over the job and keeps the
          // copies; the load then writes other weights into the shards.
          torch::NoGradGuard no_grad;
          for (int pass = 0; pass < 2; ++pass) model->forward(at::ones({2, 4}));
          accelerator.load_state(run.checkpoint);
          step = static_cast<int>(accelerator.step());
        }
        while (step < run.steps) {
          for (auto& batch : loader) {
            auto scope = accelerator.accumulate();
            accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
            accelerator.clip_grad_norm_(model->parameters(), 1.0);
            optimizer.step();
            optimizer.zero_grad();
            if (++step == run.save_after) accelerator.save_state(run.checkpoint);
            if (step == run.steps) break;
          }
        }
        const auto* shards = accelerate::sharding::unit_shards(*model->blocks[0]);
        in_group[static_cast<std::size_t>(rank)] =
            shards != nullptr && shards->gather_counts().secondary > 0;
        result.weights[static_cast<std::size_t>(rank)] =
            accelerate::testing::whole_weights(accelerator, *model);
      });
  for (char c : in_group) result.gathered_in_group = result.gathered_in_group && c != 0;
  return result;
}

void expect_bitwise(const Result& got, const Result& want) {
  BlockStack initial;
  ASSERT_FALSE(at::allclose(want.weights[0][0], initial->parameters()[0]));
  for (std::size_t r = 0; r < got.weights.size(); ++r) {
    ASSERT_EQ(got.weights[r].size(), want.weights[0].size()) << "rank " << r;
    for (std::size_t i = 0; i < want.weights[0].size(); ++i) {
      EXPECT_TRUE(at::equal(got.weights[r][i], want.weights[0][i]))
          << "rank " << r << " tensor " << i << " differs by "
          << (got.weights[r][i] - want.weights[0][i]).abs().max().item<double>();
    }
  }
}

TEST(HpzCheckpoint, ACheckpointSavedWithHpzResumesWithoutItAndTheOtherWayRound) {
  accelerate::testing::TempDir folder("hpz-checkpoint");
  const Result uninterrupted = train({/*hpz=*/1}, folder.path());
  EXPECT_FALSE(uninterrupted.gathered_in_group);
  for (const int saved_with : {2, 1}) {
    const int resumed_with = saved_with == 2 ? 1 : 2;
    HpzRun save{saved_with};
    save.save_after = 3;
    save.checkpoint = folder.path() + "/saved_with_" + std::to_string(saved_with);
    const Result saving = train(save, folder.path());
    expect_bitwise(saving, uninterrupted);
    EXPECT_EQ(saving.gathered_in_group, saved_with == 2);
    HpzRun resume{resumed_with};
    resume.resume = true;
    resume.checkpoint = save.checkpoint;
    const Result resumed = train(resume, folder.path());
    EXPECT_EQ(resumed.gathered_in_group, resumed_with == 2);
    expect_bitwise(resumed, uninterrupted);
  }
}

}  // namespace hpz_checkpoint_test
