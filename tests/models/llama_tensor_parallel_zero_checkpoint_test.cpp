// save_state at tensor parallelism under ZeRO stages 1-3, on thread
// ranks: each tp rank saves its shards of its parts, and the checkpoint
// resumes at another tp, another dp and without ZeRO with the uninterrupted
// losses and the saved weights; the optimizer state survives a round trip
// through another tp bitwise.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "accelerate/checkpoint/safetensors.h"
#include "llama_tensor_parallel_training.h"

namespace llama_tensor_parallel_zero_checkpoint_test {

using namespace llama_tensor_parallel_training;  // NOLINT: the shared helpers and names

AcceleratorOptions zero(int stage, AcceleratorOptions options = {}) {
  options.deepspeed_plugin(accelerate::DeepSpeedPlugin().zero_stage(stage));
  return options;
}

// Prepares the training objects of `options` on `world` ranks, loads `from`
// and saves it again to `to`, without a step.
void resave(int world, const AcceleratorOptions& options, size_t batch, const std::string& from,
            const std::string& to) {
  run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(std::move(comm), options);
    auto model = initial_model();
    accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                         torch::optim::AdamWOptions(1e-2));
    accelerate::DataLoader loader(token_windows(), accelerate::DataLoaderOptions(batch));
    accelerator.prepare(model, optimizer, loader);
    accelerator.load_state(from);
    accelerator.save_state(to);
  });
}

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every tensor of safetensors file `name` in folder `a` equals b's bitwise.
void expect_same_tensors(const std::string& a, const std::string& b, const std::string& name) {
  const auto left = accelerate::load_safetensors(a + "/" + name);
  const auto right = accelerate::load_safetensors(b + "/" + name);
  ASSERT_EQ(left.size(), right.size()) << name;
  ASSERT_FALSE(left.empty()) << name;
  for (size_t i = 0; i < left.size(); ++i) {
    EXPECT_EQ(left[i].first, right[i].first) << name;
    EXPECT_TRUE(left[i].second.equal(right[i].second)) << name << ": " << left[i].first;
  }
}

TEST(LlamaTensorParallelZeroCheckpoint, Tp2TimesZero2ResumesAtOtherTpAndDpAndWithoutZero) {
  // tp 2 x dp 2 at ZeRO-2, 2 windows a process: a global batch of 4.
  const auto tp2 = with(ParallelismConfig().tp_size(2), zero(2));
  accelerate::testing::TempDir dir;
  const std::string folder = dir.path() + "/tp2-zero2";
  const SavedHalfway run = save_halfway(tp2, folder);
  // Each tp rank's shards of its parts, each with its manifest.
  for (int t = 0; t < 2; ++t) {
    for (int k = 0; k < 2; ++k) {
      const std::string shard = "/optimizer_tp" + std::to_string(t) + "_rank" + std::to_string(k);
      EXPECT_TRUE(std::filesystem::exists(folder + shard + ".safetensors")) << shard;
    }
    EXPECT_TRUE(
        std::filesystem::exists(folder + "/optimizer_tp" + std::to_string(t) + "_partition.json"));
  }
  struct Resume {
    std::string what;
    int world;
    AcceleratorOptions options;
    size_t batch;
    std::vector<int> data_ranks;
    double bound;
  };
  const std::vector<Resume> resumes{
      {"tp 2 x dp 2, ZeRO-2", 4, tp2, 2, {0, 2}, 1e-6},
      {"tp 1 x dp 4, ZeRO-1", 4, zero(1), 1, {0, 1, 2, 3}, 1e-5},
      {"tp 1 x dp 2, ZeRO-2", 2, zero(2), 2, {0, 1}, 1e-5},
      {"tp 2 x dp 2 without ZeRO", 4, with(ParallelismConfig().tp_size(2)), 2, {0, 2}, 1e-5},
      {"tp 1 x dp 4 without ZeRO", 4, {}, 1, {0, 1, 2, 3}, 1e-5},
  };
  for (const Resume& resume : resumes) {
    const auto curves = curves_of(resume.world, resume.options, resume.batch, run.resume);
    expect_close(mean_losses(curves, resume.data_ranks), run.after, resume.bound, resume.what);
    for (int rank = 0; rank < resume.world; ++rank) {
      expect_weights_bitwise(curves[rank], run.saved[0],
                             resume.what + ", rank " + std::to_string(rank));
    }
  }
}

TEST(LlamaTensorParallelZeroCheckpoint, Tp2TimesZero3ResumesAtOtherTpAndDp) {
  // Stage 3 saves the weights whole from every unit gathered and its parts
  // made whole; each tp rank's optimizer shards apart, as at stage 2.
  const auto tp2 = with(ParallelismConfig().tp_size(2), zero(3));
  accelerate::testing::TempDir dir;
  const std::string folder = dir.path() + "/tp2-zero3";
  const SavedHalfway run = save_halfway(tp2, folder);
  EXPECT_TRUE(std::filesystem::exists(folder + "/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(folder + "/optimizer_tp1_rank1.safetensors"));
  const auto same = curves_of(4, tp2, 2, run.resume);
  expect_close(mean_losses(same, {0, 2}), run.after, 1e-6, "tp 2 x ZeRO-3 over 2");
  const auto unsplit = curves_of(2, zero(3), 2, run.resume);
  expect_close(mean_losses(unsplit, {0, 1}), run.after, 1e-5, "tp 1 x ZeRO-3 over 2");
  const auto plain = curves_of(4, {}, 1, run.resume);
  expect_close(mean_losses(plain, {0, 1, 2, 3}), run.after, 1e-5, "tp 1 x dp 4 without ZeRO");
  for (int rank = 0; rank < 4; ++rank) {
    expect_weights_bitwise(same[rank], run.saved[0], "tp 2 x ZeRO-3, rank " + std::to_string(rank));
    expect_weights_bitwise(plain[rank], run.saved[0], "without ZeRO, rank " + std::to_string(rank));
  }
  // Saved at stage 3 without tp, resumed at tp 2 x ZeRO-3.
  const std::string unsplit_folder = dir.path() + "/tp1-zero3";
  Leg save_unsplit = run.save, resume_split = run.resume;
  save_unsplit.save_after = resume_split.resume_from = unsplit_folder;
  const auto saved_unsplit = curves_of(2, zero(3), 2, save_unsplit);
  const auto split = curves_of(4, tp2, 2, resume_split);
  expect_close(mean_losses(split, {0, 2}), mean_losses(unsplit, {0, 1}), 1e-5,
               "saved at tp 1, resumed at tp 2 x ZeRO-3");
  expect_weights_bitwise(split[3], saved_unsplit[0], "saved at tp 1, resumed at tp 2 x ZeRO-3");
}

TEST(LlamaTensorParallelZeroCheckpoint, OptimizerStateSurvivesARoundTripThroughAnotherTpBitwise) {
  accelerate::testing::TempDir dir;
  const std::string saved = dir.path() + "/saved";
  const auto tp2 = with(ParallelismConfig().tp_size(2), zero(2));
  Leg leg;
  leg.steps = 3;
  leg.save_after = saved;
  curves_of(4, tp2, 2, leg);
  // tp 2 -> tp 1 (ZeRO-1 over 4) -> tp 2 again: the same shards.
  resave(4, zero(1), 1, saved, dir.path() + "/tp1");
  resave(4, tp2, 2, dir.path() + "/tp1", dir.path() + "/back");
  for (int t = 0; t < 2; ++t) {
    const std::string stem = "optimizer_tp" + std::to_string(t);
    EXPECT_EQ(text_of(dir.path() + "/back/" + stem + "_partition.json"),
              text_of(saved + "/" + stem + "_partition.json"));
    for (int k = 0; k < 2; ++k) {
      expect_same_tensors(saved, dir.path() + "/back",
                          stem + "_rank" + std::to_string(k) + ".safetensors");
    }
  }
  expect_same_tensors(saved, dir.path() + "/back", "model.safetensors");
  // Loaded whole on one process and at tp 2 without ZeRO: the same whole state.
  resave(1, {}, 4, saved, dir.path() + "/one");
  resave(2, with(ParallelismConfig().tp_size(2)), 4, saved, dir.path() + "/tp2-whole");
  expect_same_tensors(dir.path() + "/one", dir.path() + "/tp2-whole", "optimizer.safetensors");
}

TEST(LlamaTensorParallelZeroCheckpoint, AShardOfAnotherTpRankIsRefusedNamingTheFile) {
  accelerate::testing::TempDir dir;
  const std::string saved = dir.path() + "/saved";
  const auto tp2 = with(ParallelismConfig().tp_size(2), zero(2));
  Leg leg;
  leg.steps = 1;
  leg.save_after = saved;
  curves_of(4, tp2, 2, leg);
  // Rank 1's manifest in rank 0's place: loading at tp 1 must not mix them.
  std::filesystem::copy_file(saved + "/optimizer_tp1_partition.json",
                             saved + "/optimizer_tp0_partition.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::vector<std::string> errors(4);
  run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    errors[rank] = error_of([&] {
      Leg resume;
      resume.steps = 1;
      resume.resume_from = saved;
      train(comm, zero(1), 1, resume);
    });
  });
  for (const std::string& error : errors) {
    EXPECT_NE(error.find("optimizer_tp0_partition.json: saved by tensor-parallel rank 1 of 2, "
                         "not rank 0 of 2"),
              std::string::npos)
        << error;
  }
}

}  // namespace llama_tensor_parallel_zero_checkpoint_test
