// The save_state folder's file names and its items, without an Accelerator:
// every name comes from CheckpointFiles; items write, check and apply on
// their own; a failed item does not stop the others from writing (their
// collectives must still run); a missing or mismatched file fails the check
// step, before anything is applied.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/common/errors.h"
#include "accelerate/distributed/communicator.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_items.h"
#include "parallel/data_parallel_engine.h"
#include "support/temp_dir.h"

namespace accelerate {
namespace {

using checkpoint::CheckpointFiles;
using checkpoint::CheckpointItems;
using checkpoint::ItemContext;

TEST(CheckpointFiles, NamesEveryFileAsAccelerateDoes) {
  const CheckpointFiles files("/ckpt/checkpoint_3");
  EXPECT_EQ(files.metadata(), "/ckpt/checkpoint_3/accelerate_checkpoint.json");
  EXPECT_EQ(files.model(0), "/ckpt/checkpoint_3/model.safetensors");
  EXPECT_EQ(files.model(2), "/ckpt/checkpoint_3/model_2.safetensors");
  EXPECT_EQ(files.model_piece(1, 3), "/ckpt/checkpoint_3/model_1_rank3.safetensors");
  EXPECT_EQ(files.model_pieces_index(0), "/ckpt/checkpoint_3/model_shards.json");
  EXPECT_EQ(files.optimizer(0), "/ckpt/checkpoint_3/optimizer.bin");
  EXPECT_EQ(files.optimizer(1), "/ckpt/checkpoint_3/optimizer_1.bin");
  EXPECT_EQ(files.optimizer_shard(0, 2), "/ckpt/checkpoint_3/optimizer_rank2.bin");
  EXPECT_EQ(CheckpointFiles::tensors_beside(files.optimizer_shard(1, 0)),
            "/ckpt/checkpoint_3/optimizer_1_rank0.safetensors");
  EXPECT_EQ(files.optimizer_partition(1), "/ckpt/checkpoint_3/optimizer_1_partition.json");
  EXPECT_EQ(files.scheduler(0), "/ckpt/checkpoint_3/scheduler.bin");
  EXPECT_EQ(files.scheduler(4), "/ckpt/checkpoint_3/scheduler_4.bin");
  EXPECT_EQ(files.scaler(), "/ckpt/checkpoint_3/scaler.pt");
  EXPECT_EQ(files.custom_object(0), "/ckpt/checkpoint_3/custom_checkpoint_0.bin");
  EXPECT_EQ(files.random_states(5), "/ckpt/checkpoint_3/random_states_5.bin");
  EXPECT_EQ(checkpoint::checkpoints_folder("/runs/a"), "/runs/a/checkpoints");
}

// An archive item holding one integer.
std::unique_ptr<checkpoint::CheckpointItem> counter_item(const std::string& path, int64_t& value) {
  return checkpoint::archive_item(
      path,
      [&value](torch::serialize::OutputArchive& archive) {
        archive.write("n", torch::tensor(value));
      },
      [&value](torch::serialize::InputArchive& archive) {
        at::Tensor n;
        archive.read("n", n);
        value = n.item<int64_t>();
      });
}

TEST(CheckpointItems, ArchiveItemsWriteCheckAndApply) {
  testing::TempDir dir;
  const CheckpointFiles files(dir.path());
  int64_t saved = 7;
  int64_t restored = 0;
  CheckpointItems writing;
  writing.push_back(counter_item(files.scheduler(0), saved));
  EXPECT_EQ(checkpoint::write_items(writing, ItemContext{files}), "");
  CheckpointItems reading;
  reading.push_back(counter_item(files.scheduler(0), restored));
  checkpoint::check_items(reading, ItemContext{files});
  EXPECT_EQ(restored, 0) << "check changes nothing";
  checkpoint::apply_items(reading, ItemContext{files});
  EXPECT_EQ(restored, 7);
}

TEST(CheckpointItems, AFailedItemDoesNotStopTheOthersAndTheFirstErrorIsReported) {
  testing::TempDir dir;
  const CheckpointFiles files(dir.path());
  int64_t value = 1;
  CheckpointItems items;
  items.push_back(counter_item(dir.path() + "/no/such/folder/a.bin", value));
  items.push_back(counter_item(dir.path() + "/no/such/folder/b.bin", value));
  items.push_back(counter_item(files.scaler(), value));
  const std::string error = checkpoint::write_items(items, ItemContext{files});
  EXPECT_NE(error.find("a.bin"), std::string::npos) << error;
  EXPECT_TRUE(std::filesystem::is_regular_file(files.scaler()))
      << "the item after the failures wrote";
}

TEST(CheckpointItems, TheCheckStepNamesAMissingFileBeforeAnythingIsApplied) {
  testing::TempDir dir;
  const CheckpointFiles files(dir.path());
  int64_t first = 1;
  int64_t second = 2;
  CheckpointItems writing;
  writing.push_back(counter_item(files.custom_object(0), first));
  ASSERT_EQ(checkpoint::write_items(writing, ItemContext{files}), "");
  first = 0;
  CheckpointItems reading;
  reading.push_back(counter_item(files.custom_object(0), first));
  reading.push_back(counter_item(files.custom_object(1), second));
  try {
    checkpoint::check_items(reading, ItemContext{files});
    FAIL() << "a missing file passed the check";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint file " + files.custom_object(1) + " is missing");
  }
  EXPECT_EQ(first, 0) << "nothing applied";
}

torch::nn::Sequential small_model(double fill) {
  torch::nn::Sequential model(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  torch::NoGradGuard no_grad;
  for (auto& tensor : model->parameters()) tensor.fill_(fill);
  return model;
}

TEST(CheckpointItems, AModelAndItsOptimizerRoundTripThroughTheirItems) {
  testing::TempDir dir;
  const CheckpointFiles files(dir.path());
  auto comm = Communicator::connect(JobState());  // one process
  DataParallelEngine engine(comm, GradientSyncOptions());
  auto model = small_model(0.5);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.1));
  model->forward(torch::ones({2, 3})).sum().backward();
  optimizer.step();
  std::vector<torch::nn::Module*> models = {model.ptr().get()};
  CheckpointItems writing;
  writing.push_back(engine.model_item(*model, 0, module_state_dict(*model), /*by_groups=*/true));
  writing.push_back(engine.optimizer_item(optimizer, 0, models, nullptr));
  ASSERT_EQ(checkpoint::write_items(writing, ItemContext{files}), "");
  EXPECT_TRUE(std::filesystem::is_regular_file(files.model(0)));
  EXPECT_TRUE(std::filesystem::is_regular_file(files.optimizer(0)));

  auto restored = small_model(-1.0);
  torch::optim::Adam restored_optimizer(restored->parameters(), torch::optim::AdamOptions(0.1));
  std::vector<torch::nn::Module*> restored_models = {restored.ptr().get()};
  CheckpointMetadata metadata;  // nothing sharded
  const ItemContext context{files, 0, 1, false, &metadata};
  CheckpointItems reading;
  reading.push_back(engine.model_item(*restored, 0, {}, true));
  reading.push_back(engine.optimizer_item(restored_optimizer, 0, restored_models, nullptr));
  checkpoint::check_items(reading, context);
  EXPECT_TRUE(torch::equal(restored->parameters()[0], torch::full({4, 3}, -1.0)))
      << "check changes nothing";
  checkpoint::apply_items(reading, context);
  const auto want = module_state_dict(*model);
  const auto got = module_state_dict(*restored);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << got[i].first;
  }
  // The next steps agree, so the optimizer state came back too.
  for (auto* pair : {&model, &restored}) {
    (*pair)->forward(torch::ones({2, 3})).sum().backward();
  }
  optimizer.step();
  restored_optimizer.step();
  EXPECT_TRUE(torch::equal(restored->parameters()[0], model->parameters()[0]));
}

TEST(CheckpointItems, AModelFileWithAnotherShapeFailsTheCheckNamingTheTensor) {
  testing::TempDir dir;
  const CheckpointFiles files(dir.path());
  auto comm = Communicator::connect(JobState());
  DataParallelEngine engine(comm, GradientSyncOptions());
  auto model = small_model(0.5);
  CheckpointItems writing;
  writing.push_back(engine.model_item(*model, 0, module_state_dict(*model), true));
  ASSERT_EQ(checkpoint::write_items(writing, ItemContext{files}), "");
  torch::nn::Sequential other(torch::nn::Linear(3, 5), torch::nn::BatchNorm1d(5));
  CheckpointMetadata metadata;
  CheckpointItems reading;
  reading.push_back(engine.model_item(*other, 0, {}, true));
  try {
    checkpoint::check_items(reading, ItemContext{files, 0, 1, false, &metadata});
    FAIL() << "a mismatched model passed the check";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace accelerate
