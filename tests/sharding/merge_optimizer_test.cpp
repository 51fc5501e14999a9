// `accelerate merge-weights --include_optimizer`: a ZeRO checkpoint saved by
// 2 processes (stages 1-3) becomes a checkpoint whose models are whole and
// whose optimizer state is one process's shard, and one process resumed
// from it takes the step the 2 processes took after the save (within fp32
// rounding: the gradient is summed in another order). Torn checkpoints are
// refused with one line, and nothing is written.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/checkpoint/model_saving.h"
#include "sharding/zero_test_model.h"
#include "support/process_runner.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace merge_optimizer_test {

namespace fs = std::filesystem;
using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::testing::BlockStack;
using accelerate::testing::Call;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kDepth = 3, kWidth = 32, kHidden = 48, kRows = 16, kSavedSteps = 3;

// Step `step`'s global batch (kRows rows of BlockStack's 4 inputs); process `rank` of `world` takes
// its kRows / world of them, so every world sees the same global batch.
std::pair<at::Tensor, at::Tensor> batch_of(int step, int rank, int world) {
  const at::Tensor x =
      torch::sin(torch::arange(kRows * 4, at::kFloat).reshape({kRows, 4}) * (0.37 + 0.05 * step));
  const at::Tensor y = torch::cos(1.3 * x.sum(1, true));
  const int64_t rows = kRows / world;
  return {x.narrow(0, rank * rows, rows), y.narrow(0, rank * rows, rows)};
}

struct Session {
  int stage = 0;                // ZeRO stage (0: none)
  std::string resume_from;      // load_state before training ("" none)
  std::string model_only_from;  // load_model only (a fresh optimizer), the control
  int first_step = 0, last_step = 0;
  std::string save_state_after;  // save_state after kSavedSteps steps
  std::string save_model_to;     // save_model at the end
};

void train(std::shared_ptr<Communicator> comm, const Session& session) {
  AcceleratorOptions options;
  if (session.stage > 0) {
    options.deepspeed_plugin(
        DeepSpeedPlugin().zero_stage(session.stage).gradient_clipping(std::nullopt));
  }
  const int rank = comm->rank(), world = comm->world_size();
  Accelerator accelerator(std::move(comm), options);
  BlockStack model(Call::kUnitForward, kDepth, kWidth, kHidden);
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(0.01));
  accelerator.prepare(model, optimizer);
  if (!session.resume_from.empty()) accelerator.load_state(session.resume_from);
  if (!session.model_only_from.empty()) accelerate::load_model(*model, session.model_only_from);
  for (int step = session.first_step; step < session.last_step; ++step) {
    const auto [x, y] = batch_of(step, rank, world);
    accelerator.backward(torch::mse_loss(model->forward(x), y));
    optimizer.step();
    optimizer.zero_grad();
    if (step + 1 == kSavedSteps && !session.save_state_after.empty()) {
      accelerator.save_state(session.save_state_after);
    }
  }
  accelerator.save_model(model, session.save_model_to);
}

void run_session(int world, const Session& session) {
  accelerate::testing::run_rank_communicators(
      world, [&](std::shared_ptr<Communicator> comm) { train(std::move(comm), session); });
}

accelerate::testing::RunResult merge(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ACCELERATE_CLI_PATH, "merge-weights"};
  argv.insert(argv.end(), args.begin(), args.end());
  return accelerate::testing::run_program(argv, {}, std::chrono::seconds(60));
}

std::vector<at::Tensor> saved_parameters(const std::string& dir) {
  BlockStack model(Call::kDirect, kDepth, kWidth, kHidden);
  accelerate::load_model(*model, dir);
  std::vector<at::Tensor> parameters;
  for (const auto& p : model->parameters()) parameters.push_back(p.detach().clone());
  return parameters;
}

// The largest difference between two models' parameters.
double max_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

std::string text_of(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class MergeOptimizer : public ::testing::TestWithParam<int> {};

TEST_P(MergeOptimizer, OneProcessResumedFromTheMergeTakesTheTwoProcessStep) {
  const int stage = GetParam();
  accelerate::testing::TempDir dir("merge-optimizer");
  Session sharded;
  sharded.stage = stage;
  sharded.last_step = kSavedSteps + 1;
  sharded.save_state_after = dir.file("checkpoint");
  sharded.save_model_to = dir.file("two-process-next");
  run_session(2, sharded);
  ASSERT_TRUE(fs::exists(dir.file("checkpoint/optimizer_rank1.safetensors")));

  const auto result = merge({dir.file("checkpoint"), dir.file("merged"), "--include_optimizer"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  // One process's shard, whole models, everything else copied.
  EXPECT_TRUE(fs::exists(dir.file("merged/optimizer_rank0.safetensors")));
  EXPECT_FALSE(fs::exists(dir.file("merged/optimizer_rank1.bin")));
  EXPECT_FALSE(fs::exists(dir.file("merged/model_rank0.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("merged/model.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("merged/random_states_1.bin")));
  EXPECT_THAT(text_of(dir.file("merged/optimizer_partition.json")), HasSubstr("\"world_size\": 1"));
  EXPECT_THAT(text_of(dir.file("merged/accelerate_checkpoint.json")),
              HasSubstr("\"shard_world_size\": 1"));

  Session resumed;
  resumed.resume_from = dir.file("merged");
  resumed.first_step = kSavedSteps;
  resumed.last_step = kSavedSteps + 1;
  resumed.save_model_to = dir.file("one-process-next");
  run_session(1, resumed);
  const auto want = saved_parameters(dir.file("two-process-next"));
  const double difference = max_difference(saved_parameters(dir.file("one-process-next")), want);
  EXPECT_LT(difference, 1e-6) << "stage " << stage;
  RecordProperty("max_difference", c10::str(difference));

  // The control: the merged model with a fresh optimizer steps elsewhere,
  // so the tolerance above tells the merged state from none.
  Session model_only = resumed;
  model_only.resume_from.clear();
  model_only.model_only_from = dir.file("merged");
  model_only.save_model_to = dir.file("model-only-next");
  run_session(1, model_only);
  const double control = max_difference(saved_parameters(dir.file("model-only-next")), want);
  EXPECT_GT(control, 1e-4);
  RecordProperty("model_only_difference", c10::str(control));
}

INSTANTIATE_TEST_SUITE_P(Stages, MergeOptimizer, ::testing::Values(1, 2, 3));

// A missing or truncated shard of the optimizer is refused with one line
// naming the file (exit 1), and neither the output nor a staging folder is
// left; options a resumable checkpoint cannot honour are refused (exit 2).
TEST(MergeOptimizerRefusals, TornOptimizerShardsAndConflictingOptions) {
  accelerate::testing::TempDir dir("merge-optimizer-torn");
  Session sharded;
  sharded.stage = 2;
  sharded.last_step = kSavedSteps;
  sharded.save_state_after = dir.file("checkpoint");
  sharded.save_model_to = dir.file("model");
  run_session(2, sharded);
  const fs::path checkpoint = dir.file("checkpoint");

  int refusals = 0;
  const auto refused = [&](const std::string& file, const std::string& message) {
    const auto result = merge({checkpoint.string(), dir.file("out"), "--include_optimizer"});
    RecordProperty("refusal_" + std::to_string(refusals++), result.err);
    EXPECT_EQ(result.exit_code, 1) << file << ": " << result.err;
    EXPECT_THAT(result.err, HasSubstr(message)) << file;
    EXPECT_THAT(result.err, HasSubstr(file));
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_FALSE(fs::exists(dir.file("out")));
    for (const auto& entry : fs::directory_iterator(dir.path())) {
      EXPECT_THAT(entry.path().filename().string(), Not(HasSubstr(".merge-weights-")));
    }
  };
  const fs::path shard = checkpoint / "optimizer_rank1.safetensors";
  const std::string bytes = text_of(shard);
  fs::remove(shard);
  refused("optimizer_rank1.safetensors", "is missing (process 1's shard of optimizer 0");
  {
    std::ofstream cut(shard, std::ios::binary);
    cut.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  refused("optimizer_rank1.safetensors", "");

  // Without ZeRO a multi-process checkpoint resumes on its processes only.
  Session data_parallel = sharded;
  data_parallel.stage = 0;
  data_parallel.save_state_after = dir.file("stage0");
  run_session(2, data_parallel);
  const auto whole = merge({dir.file("stage0"), dir.file("out"), "--include_optimizer"});
  EXPECT_EQ(whole.exit_code, 1);
  EXPECT_THAT(whole.err, HasSubstr("saved by 2 processes without ZeRO"));
  EXPECT_FALSE(fs::exists(dir.file("out")));

  // Saved at tensor parallelism, each tp rank's shards apart: load_state's.
  const fs::path at_tp = dir.file("at-tp");
  fs::copy(checkpoint, at_tp, fs::copy_options::recursive);
  {
    const fs::path metadata = at_tp / "accelerate_checkpoint.json";
    std::string json = text_of(metadata);
    json.insert(json.find('{') + 1, "\n  \"tensor_parallel_size\": 2,");
    std::ofstream(metadata) << json;
  }
  const auto split = merge({at_tp.string(), dir.file("out"), "--include_optimizer"});
  EXPECT_EQ(split.exit_code, 1) << split.err;
  EXPECT_THAT(split.err, HasSubstr("was saved at tp_size 2 with ZeRO"));
  EXPECT_THAT(split.err, HasSubstr("resume it with load_state at any tp and dp"));
  EXPECT_FALSE(fs::exists(dir.file("out")));

  for (const std::string flag : {"--dtype=bf16", "--max_shard_size=1MB", "--model=0"}) {
    const auto result = merge({checkpoint.string(), dir.file("out"), "--include_optimizer", flag});
    EXPECT_EQ(result.exit_code, 2) << flag;
    EXPECT_THAT(result.err, HasSubstr("does not go with --include_optimizer")) << flag;
  }
}

}  // namespace merge_optimizer_test
