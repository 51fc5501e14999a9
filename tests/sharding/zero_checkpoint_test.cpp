// save_state / load_state with ZeRO: each process writes the optimizer state
// of its own shard (optimizer_rank<r>.bin/.safetensors), and a run resumed
// from a checkpoint ends bitwise where the uninterrupted run ends. Ranks are
// threads with real collectives sharing one checkpoint folder.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "sharding/zero_test_model.h"
#include "support/thread_ranks.h"

namespace {

namespace fs = std::filesystem;
using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::testing::ZeroNet;
using ::testing::HasSubstr;

struct ResumeRun {
  int stage = 2;
  int save_after = -1;     // save_state after this many steps (-1: never)
  std::string checkpoint;  // folder to save into or resume from
  bool resume = false;     // load_state(checkpoint) before training
  int steps = 10;          // steps in all (a resumed run skips the saved ones)
  std::string save_to;     // with resume: save_state here right after loading
  double bucket_cap_mb = 0.002;
};

// Trains ZeroNet with AdamW on this rank's shard of the data for
// `run.steps` steps, saving or resuming as asked; returns the parameters.
std::vector<at::Tensor> train_with_checkpoint(std::shared_ptr<Communicator> comm,
                                              const ResumeRun& run) {
  AcceleratorOptions options;
  options.ddp_options(accelerate::GradientSyncOptions()
                          .bucket_cap_mb(run.bucket_cap_mb)
                          .first_bucket_cap_mb(0.0005));
  // No automatic clipping: stage 0 here is plain data parallelism, which does not clip.
  if (run.stage > 0) {
    options.deepspeed_plugin(
        DeepSpeedPlugin().zero_stage(run.stage).gradient_clipping(std::nullopt));
  }
  Accelerator accelerator(std::move(comm), options);
  ZeroNet model;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(0.01));
  accelerate::DataLoader loader(accelerate::testing::zero_data(256),
                                accelerate::DataLoaderOptions(8));
  accelerator.prepare(model, optimizer, loader);
  int step = 0;
  if (run.resume) {
    accelerator.load_state(run.checkpoint);
    step = static_cast<int>(accelerator.step());
    if (!run.save_to.empty()) accelerator.save_state(run.save_to);
  }
  while (step < run.steps) {
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate();  // counts Accelerator::step()
      accelerator.backward(torch::mse_loss(model->forward(batch.data, true), batch.target));
      optimizer.step();
      optimizer.zero_grad();
      if (++step == run.save_after) accelerator.save_state(run.checkpoint);
      if (step == run.steps) break;
    }
  }
  std::vector<at::Tensor> parameters;
  for (const auto& p : model->parameters()) parameters.push_back(p.detach().clone());
  return parameters;
}

std::vector<std::vector<at::Tensor>> run_ranks(int world, const ResumeRun& run) {
  std::vector<std::vector<at::Tensor>> out(world);
  accelerate::testing::run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    out[rank] = train_with_checkpoint(comm, run);
  });
  return out;
}

// A run of `steps` steps at `stage` that saves into `dir` at its end
// (after `save_after` steps when given).
ResumeRun saving(int stage, int steps, const std::string& dir, int save_after = -1) {
  ResumeRun run;
  run.stage = stage;
  run.steps = steps;
  run.save_after = save_after < 0 ? steps : save_after;
  run.checkpoint = dir;
  return run;
}

// `saved` continued: it loads its checkpoint and trains to its last step.
ResumeRun resuming(ResumeRun saved) {
  saved.save_after = -1;
  saved.resume = true;
  return saved;
}

// What each rank's train_with_checkpoint(run) threw ("" if nothing).
std::vector<std::string> errors_of(int world, const ResumeRun& run) {
  std::vector<std::string> errors(world);
  accelerate::testing::run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    try {
      train_with_checkpoint(comm, run);
    } catch (const accelerate::Error& error) {
      errors[rank] = error.what();
    }
  });
  return errors;
}

std::string fresh_checkpoint_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("accelerate-zero-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}

class ZeroResume : public ::testing::TestWithParam<int> {};

TEST_P(ZeroResume, ResumedRunEndsBitwiseWhereTheUninterruptedOneDoes) {
  const int stage = GetParam();
  const std::string dir = fresh_checkpoint_dir("resume-" + std::to_string(stage));
  const ResumeRun whole = saving(stage, /*steps=*/10, dir, /*save_after=*/4);
  const auto uninterrupted = run_ranks(2, whole);
  // With ZeRO each process saved its own shard's optimizer state (stage 0,
  // the control, saves one optimizer.bin).
  EXPECT_EQ(fs::is_regular_file(fs::path(dir) / "optimizer_rank0.bin"), stage > 0);
  EXPECT_EQ(fs::is_regular_file(fs::path(dir) / "optimizer_rank1.safetensors"), stage > 0);
  EXPECT_EQ(fs::exists(fs::path(dir) / "optimizer.bin"), stage == 0);

  const auto continued = run_ranks(2, resuming(whole));
  for (int r = 0; r < 2; ++r) {
    for (std::size_t i = 0; i < uninterrupted[r].size(); ++i) {
      EXPECT_TRUE(at::equal(continued[r][i], uninterrupted[r][i]))
          << "rank " << r << ", parameter " << i << ": max difference "
          << (continued[r][i] - uninterrupted[r][i]).abs().max().item<double>();
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroResume, ::testing::Values(0, 1, 2));

TEST(ZeroResumeErrors, AWholeOptimizerStateDoesNotLoadIntoAShardedOne) {
  const std::string dir = fresh_checkpoint_dir("mismatch");
  const ResumeRun save = saving(0, /*steps=*/2, dir);
  run_ranks(2, save);
  ResumeRun sharded = resuming(save);
  sharded.stage = 2;
  for (const auto& error : errors_of(2, sharded)) {
    EXPECT_THAT(error, HasSubstr("holds the whole state of optimizer 0 but this Accelerator "
                                 "shards it"));
  }
  fs::remove_all(dir);
}

// The per-process files cut the buckets; buckets follow bucket_cap_mb. A
// checkpoint whose partition manifest describes other buckets is refused
// before anything changes, on the same and on another number of processes.
TEST(ZeroResumeErrors, AnotherBucketLayoutIsRefusedByThePartitionManifest) {
  const std::string dir = fresh_checkpoint_dir("layout");
  const ResumeRun save = saving(2, /*steps=*/2, dir);
  run_ranks(2, save);
  EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / "optimizer_partition.json"));
  for (int world : {2, 3}) {
    ResumeRun other = resuming(save);
    other.bucket_cap_mb = 0.004;
    for (const auto& error : errors_of(world, other)) {
      EXPECT_THAT(error, HasSubstr("optimizer_partition.json: the saved ZeRO partition differs "
                                   "from this job's at model 0"))
          << world << " processes";
    }
  }
  fs::remove_all(dir);
}

// Each process reads its own optimizer file: one missing on one process
// fails the load on every process, at once, before anything changed (not
// one process training on while the others wait in a collective).
TEST(ZeroResumeErrors, AFileMissingForOneProcessFailsTheLoadEverywhere) {
  const std::string dir = fresh_checkpoint_dir("missing");
  const ResumeRun save = saving(2, /*steps=*/2, dir);
  run_ranks(2, save);
  fs::remove(fs::path(dir) / "optimizer_rank1.bin");
  for (const auto& error : errors_of(2, resuming(save))) {
    EXPECT_THAT(error, HasSubstr("load_state from " + dir + " failed on rank 1"));
    EXPECT_THAT(error, HasSubstr("optimizer_rank1.bin"));
  }
  fs::remove_all(dir);
}

// Every state tensor of `dir`'s optimizer.safetensors (a whole, unsharded
// optimizer state), by name.
std::map<std::string, at::Tensor> whole_optimizer_state(const std::string& dir) {
  accelerate::SafetensorsReader reader((fs::path(dir) / "optimizer.safetensors").string());
  std::map<std::string, at::Tensor> state;
  for (const auto& name : reader.names()) state[name] = reader.read(name);
  return state;
}

// Saved by 2 processes at stage 2, loaded and saved again by 3, then by 1
// (which has no ZeRO: one process), the optimizer state is bitwise the
// whole state that data parallelism (stage 0, equal to stage 2 bitwise)
// saved after the same steps; and training continues after each load.
TEST(ZeroReshard, TwoThenThreeThenOneProcessesKeepTheExactOptimizerState) {
  const std::string a = fresh_checkpoint_dir("reshard-a"), b = fresh_checkpoint_dir("reshard-b"),
                    c = fresh_checkpoint_dir("reshard-c"), d = fresh_checkpoint_dir("reshard-d");
  run_ranks(2, saving(2, /*steps=*/4, a));
  run_ranks(2, saving(0, /*steps=*/4, d));

  ResumeRun on_three = resuming(saving(2, /*steps=*/8, a));
  on_three.save_to = b;  // right after loading
  const auto three = run_ranks(3, on_three);
  EXPECT_TRUE(fs::is_regular_file(fs::path(b) / "optimizer_rank2.bin"));
  ResumeRun on_one = on_three;
  on_one.checkpoint = b;
  on_one.save_to = c;
  const auto one = run_ranks(1, on_one);
  for (const auto& p : three[0]) EXPECT_TRUE(p.isfinite().all().item<bool>());
  for (const auto& p : one[0]) EXPECT_TRUE(p.isfinite().all().item<bool>());

  const auto resharded = whole_optimizer_state(c);
  const auto expected = whole_optimizer_state(d);
  ASSERT_EQ(resharded.size(), expected.size());
  ASSERT_FALSE(expected.empty());
  for (const auto& [name, tensor] : expected) {
    ASSERT_TRUE(resharded.count(name)) << name;
    EXPECT_TRUE(at::equal(resharded.at(name), tensor)) << name;
  }
  for (const auto& dir : {a, b, c, d}) fs::remove_all(dir);
}

}  // namespace
