// The Accelerator's data-parallel facade under ZeRO stages 1 and 2:
// gather_for_metrics over an evaluation loader whose dataset does not divide
// evenly, unwrap_model, save_model and load_model. Stages 1 and 2 shard the
// training state, not the weights (docs/sharding.md): after each optimizer
// step the shards are all-gathered into flat buffers that the parameters are
// views of. Evaluation, unwrapping and saving must therefore see exactly the
// model that data parallelism (no deepspeed_plugin) trains, so every result
// is compared with the data-parallel run bitwise, on 2 ranks that are
// threads with real collectives (sums in rank order, so ZeRO equals data
// parallelism bitwise). Buckets are tiny so that parameters straddle shard
// boundaries.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/checkpoint/model_saving.h"
#include "sharding/zero_test_model.h"
#include "sharding/zero_test_support.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

// Named (not anonymous): sharding_tests is a unity build, and the other
// files' anonymous namespaces define names such as plugin_run and run_ranks.
namespace zero_facade {

namespace fs = std::filesystem;
using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::testing::ZeroNet;

constexpr int kWorld = 2;
constexpr int64_t kEvalSamples = 22;  // batches of 4 on 2 ranks: the last global batch is short
constexpr int kEpochs = 2;

// 22 evaluation samples of the training task, from their own generator.
accelerate::TensorDataset eval_data() {
  auto generator = at::detail::createCPUGenerator(7);
  auto x = at::randn({kEvalSamples, 4}, generator);
  return accelerate::TensorDataset(x, x.sin().sum(1, true));
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

struct Evaluation {
  at::Tensor predictions;  // gathered for metrics, in the order gathered
  at::Tensor targets;
};

// What one rank saw of a run.
struct FacadeRun {
  std::string distributed_type;
  std::vector<Evaluation> evaluations;  // one after each epoch
  bool unwrap_is_the_model = false;
  std::vector<at::Tensor> unwrapped;  // unwrap_model(model)'s parameters after training
  int64_t state_elements = 0;         // this rank's optimizer state
  int64_t total_elements = 0;
  std::vector<std::string> saved_files;  // what save_model returned on this rank
  std::string model_file;                // model.safetensors's bytes, read after save_model
  std::vector<at::Tensor> loaded_fresh;  // a new ZeroNet after load_model
  // The prepared model's parameters after they were zeroed and load_model
  // read the file back into them, and after two more training steps.
  std::vector<at::Tensor> reloaded;
  std::vector<at::Tensor> trained_after_reload;
};

// Trains ZeroNet with AdamW for kEpochs epochs (stage 0: no deepspeed_plugin,
// i.e. data parallelism), evaluating with gather_for_metrics after each one;
// then unwraps, saves into `save_dir`, loads back, and trains two more steps.
FacadeRun facade_run(std::shared_ptr<Communicator> comm, int stage, const std::string& save_dir) {
  AcceleratorOptions options;
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  if (stage > 0) {
    // No clipping, explicitly: the run without a plugin does not clip.
    options.deepspeed_plugin(DeepSpeedPlugin().zero_stage(stage).gradient_clipping(std::nullopt));
  }
  Accelerator accelerator(std::move(comm), options);
  ZeroNet model;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(
      model->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.05));
  accelerate::DataLoader train_loader(accelerate::testing::zero_data(96),
                                      accelerate::DataLoaderOptions(8));
  accelerate::DataLoader eval_loader(eval_data(), accelerate::DataLoaderOptions(4));
  accelerator.prepare(model, optimizer, train_loader, eval_loader);

  auto train_step = [&](const auto& batch) {
    auto scope = accelerator.accumulate();
    accelerator.backward(torch::mse_loss(model->forward(batch.data, true), batch.target));
    optimizer.step();
    optimizer.zero_grad();
  };

  FacadeRun run;
  run.distributed_type = to_string(accelerator.distributed_type());
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    for (auto& batch : train_loader) train_step(batch);
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> predictions, targets;
    for (auto& batch : eval_loader) {
      predictions.push_back(accelerator.gather_for_metrics(model->forward(batch.data, true)));
      targets.push_back(accelerator.gather_for_metrics(batch.target));
    }
    run.evaluations.push_back({at::cat(predictions), at::cat(targets)});
  }

  auto& unwrapped = accelerator.unwrap_model(model);
  run.unwrap_is_the_model = unwrapped.ptr() == model.ptr();
  run.unwrapped = clones(unwrapped->parameters());
  run.state_elements = accelerate::testing::optimizer_state_elements(optimizer);
  for (const auto& p : model->parameters()) run.total_elements += p.numel();

  run.saved_files = accelerator.save_model(unwrapped, save_dir);
  run.model_file = file_bytes((fs::path(save_dir) / "model.safetensors").string());

  ZeroNet fresh;
  accelerate::load_model(*fresh, save_dir);
  run.loaded_fresh = clones(fresh->parameters());

  {  // Zero the prepared model's weights (its flat buffers) and read them back.
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.zero_();
  }
  accelerate::load_model(*model, save_dir);
  run.reloaded = clones(model->parameters());
  // Training continues from the loaded weights: the optimizer's shards are
  // views of the same buffers.
  int steps = 0;
  for (auto& batch : train_loader) {
    train_step(batch);
    if (++steps == 2) break;
  }
  run.trained_after_reload = clones(model->parameters());
  return run;
}

// Every rank's FacadeRun at `stage`, saving into `save_dir`.
std::vector<FacadeRun> on_ranks(int stage, const std::string& save_dir) {
  std::vector<FacadeRun> runs(kWorld);
  accelerate::testing::run_rank_communicators(kWorld, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    runs[rank] = facade_run(comm, stage, save_dir);
  });
  return runs;
}

void expect_bitwise(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << what << ", tensor " << i;
    EXPECT_TRUE(at::equal(got[i], want[i])) << what << ", tensor " << i << ": max difference "
                                            << (got[i] - want[i]).abs().max().item<double>();
  }
}

// The sharded run at stage GetParam() and the data-parallel run, each with
// its own save folder.
class ZeroFacade : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    sharded_ = on_ranks(GetParam(), scratch_.file("sharded"));
    data_parallel_ = on_ranks(0, scratch_.file("data_parallel"));
    ASSERT_EQ(sharded_.size(), static_cast<std::size_t>(kWorld));
    ASSERT_EQ(data_parallel_.size(), static_cast<std::size_t>(kWorld));
  }
  // The comparisons prove something only if the sharded run really is
  // sharded and the data-parallel one is not.
  void expect_really_sharded() const {
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(sharded_[r].distributed_type, "DEEPSPEED") << "rank " << r;
      EXPECT_GT(sharded_[r].state_elements, 0) << "rank " << r;
      EXPECT_LT(sharded_[r].state_elements, sharded_[r].total_elements)
          << "rank " << r << ": the optimizer state is not sharded";
      EXPECT_EQ(data_parallel_[r].distributed_type, "MULTI_CPU") << "rank " << r;
      EXPECT_EQ(data_parallel_[r].state_elements, data_parallel_[r].total_elements) << "rank " << r;
    }
  }
  accelerate::testing::TempDir scratch_{"accelerate-zero-facade"};
  std::vector<FacadeRun> sharded_, data_parallel_;
};

TEST_P(ZeroFacade, GatherForMetricsYieldsEachEvalSampleOnceAndDataParallelismsPredictions) {
  expect_really_sharded();
  const auto dataset = eval_data();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(sharded_[r].evaluations.size(), static_cast<std::size_t>(kEpochs));
    ASSERT_EQ(data_parallel_[r].evaluations.size(), static_cast<std::size_t>(kEpochs));
    for (int e = 0; e < kEpochs; ++e) {
      const auto& got = sharded_[r].evaluations[e];
      const auto& want = data_parallel_[r].evaluations[e];
      const std::string where = "rank " + std::to_string(r) + ", epoch " + std::to_string(e);
      // Exactly the dataset: its length, its samples in order (the padding
      // even_batches added to the short last batch is dropped).
      ASSERT_EQ(got.targets.size(0), kEvalSamples) << where;
      ASSERT_EQ(got.predictions.size(0), kEvalSamples) << where;
      EXPECT_TRUE(at::equal(got.targets, dataset.targets())) << where;
      // The sharded model evaluates exactly as data parallelism's.
      expect_bitwise({got.predictions, got.targets}, {want.predictions, want.targets}, where);
    }
  }
  // The model trained between the evaluations, and every rank gathered the
  // same predictions.
  EXPECT_FALSE(
      at::equal(sharded_[0].evaluations[0].predictions, sharded_[0].evaluations[1].predictions));
  EXPECT_TRUE(
      at::equal(sharded_[0].evaluations[1].predictions, sharded_[1].evaluations[1].predictions));
  // The predictions are the trained model's on the whole dataset (one
  // forward of all 22 samples; other batch shapes may round differently).
  ZeroNet trained;
  {
    torch::NoGradGuard no_grad;
    const auto parameters = trained->parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      parameters[i].copy_(data_parallel_[0].unwrapped[i]);
    }
    EXPECT_TRUE(at::allclose(sharded_[0].evaluations[1].predictions,
                             trained->forward(dataset.data(), true), 1e-5, 1e-6));
  }
}

TEST_P(ZeroFacade, UnwrapModelHoldsTheFullTrainedParametersOnEveryRank) {
  expect_really_sharded();
  ZeroNet initial;
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(sharded_[r].unwrap_is_the_model) << "rank " << r;
    ASSERT_EQ(sharded_[r].unwrapped.size(), initial->parameters().size());
    // Full shapes, not this rank's shard.
    for (std::size_t i = 0; i < sharded_[r].unwrapped.size(); ++i) {
      EXPECT_EQ(sharded_[r].unwrapped[i].sizes(), initial->parameters()[i].sizes());
    }
    expect_bitwise(sharded_[r].unwrapped, data_parallel_[r].unwrapped,
                   "rank " + std::to_string(r) + " against data parallelism");
  }
  expect_bitwise(sharded_[1].unwrapped, sharded_[0].unwrapped, "rank 1 against rank 0");
  for (std::size_t i = 0; i < initial->parameters().size(); ++i) {
    EXPECT_FALSE(at::equal(sharded_[0].unwrapped[i], initial->parameters()[i]))
        << "training did not move parameter " << i << ": the comparison proves nothing";
  }
}

TEST_P(ZeroFacade, SaveModelWritesDataParallelismsFileAndLoadModelReadsItBack) {
  expect_really_sharded();
  // The main process writes model.safetensors; the others write nothing.
  ASSERT_EQ(sharded_[0].saved_files.size(), 1u);
  EXPECT_EQ(fs::path(sharded_[0].saved_files[0]).filename(), "model.safetensors");
  EXPECT_TRUE(sharded_[1].saved_files.empty());
  ASSERT_FALSE(sharded_[0].model_file.empty());
  ASSERT_FALSE(data_parallel_[0].model_file.empty());
  EXPECT_TRUE(sharded_[0].model_file == data_parallel_[0].model_file)
      << "model.safetensors differs from data parallelism's (" << sharded_[0].model_file.size()
      << " and " << data_parallel_[0].model_file.size() << " bytes)";
  for (int r = 0; r < kWorld; ++r) {
    const std::string rank = "rank " + std::to_string(r);
    // Every rank read the finished file once save_model returned.
    EXPECT_TRUE(sharded_[r].model_file == sharded_[0].model_file) << rank;
    expect_bitwise(sharded_[r].loaded_fresh, sharded_[r].unwrapped, rank + ", a new model");
    expect_bitwise(sharded_[r].reloaded, sharded_[r].unwrapped, rank + ", the prepared model");
    // Training goes on from the loaded weights as data parallelism's does.
    expect_bitwise(sharded_[r].trained_after_reload, data_parallel_[r].trained_after_reload,
                   rank + ", two steps after load_model");
    EXPECT_FALSE(at::equal(sharded_[r].trained_after_reload[0], sharded_[r].reloaded[0]))
        << rank << ": the steps after load_model changed nothing";
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroFacadeStages, ZeroFacade, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "Stage" + std::to_string(info.param);
                         });

}  // namespace zero_facade
