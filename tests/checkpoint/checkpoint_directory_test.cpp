// Checkpoint folders on their own: numbering, finding the newest complete
// one, pruning in numeric order, staging and the atomic rename, the metadata
// file, and errors agreed by every rank.
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "accelerate/checkpoint/checkpointing.h"
#include "accelerate/common/errors.h"
#include "accelerate/distributed/communicator.h"
#include "support/error_message.h"
#include "support/process_runner.h"
#include "support/thread_ranks.h"

namespace accelerate {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TemporaryFolder;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A complete checkpoint as far as the folder mechanics care.
void fake_checkpoint(const fs::path& folder) {
  write_text(folder / kCheckpointMetadataFile, CheckpointMetadata().to_json());
}

std::vector<std::string> names(const std::vector<std::string>& paths) {
  std::vector<std::string> result;
  for (const auto& path : paths) result.push_back(fs::path(path).filename().string());
  return result;
}

using testing::error_of;

TEST(CheckpointNames, NumbersOnlyPlainNumberedFolders) {
  EXPECT_EQ(checkpoint_folder_name(7), "checkpoint_7");
  EXPECT_EQ(checkpoint_number("checkpoint_10"), 10);
  EXPECT_EQ(checkpoint_number("checkpoint_0"), 0);
  EXPECT_EQ(checkpoint_number("checkpoint_"), std::nullopt);
  EXPECT_EQ(checkpoint_number("checkpoint_1a"), std::nullopt);
  EXPECT_EQ(checkpoint_number(".checkpoint_3.incomplete"), std::nullopt);
  EXPECT_EQ(checkpoint_number("checkpoint_-1"), std::nullopt);
}

TEST(CheckpointList, NumericOrderAndOnlyCompleteOnes) {
  TemporaryFolder tmp;
  for (int n : {2, 10, 9, 1}) fake_checkpoint(fs::path(tmp.path()) / checkpoint_folder_name(n));
  fs::create_directories(fs::path(tmp.path()) / "checkpoint_11");  // no metadata: incomplete
  fake_checkpoint(fs::path(tmp.path()) / ".checkpoint_12.incomplete");
  fake_checkpoint(fs::path(tmp.path()) / "notes");
  EXPECT_THAT(names(list_checkpoints(tmp.path())),
              ElementsAre("checkpoint_1", "checkpoint_2", "checkpoint_9", "checkpoint_10"));
  EXPECT_EQ(fs::path(*latest_checkpoint(tmp.path())).filename(), "checkpoint_10");
  EXPECT_EQ(latest_checkpoint(tmp.path() + "/nowhere"), std::nullopt);
}

TEST(CheckpointPrune, KeepsTheNumericallyNewestAndClearsLeftovers) {
  TemporaryFolder tmp;
  const fs::path root = tmp.path();
  for (int n = 0; n <= 10; ++n) fake_checkpoint(root / checkpoint_folder_name(n));
  write_text(root / ".checkpoint_3.deleting" / "junk", "x");  // an interrupted deletion
  auto deleted = prune_checkpoints(root.string(), 2);
  EXPECT_EQ(deleted.size(), 9u);
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(root)) left.push_back(entry.path().filename());
  std::sort(left.begin(), left.end());
  EXPECT_THAT(left, ElementsAre("checkpoint_10", "checkpoint_9"));
}

TEST(CheckpointMetadataFile, RoundTripsAndRejectsBadFiles) {
  CheckpointMetadata metadata;
  metadata.world_size = 2;
  metadata.models = 3;
  metadata.step = 17;
  metadata.optimizer_steps = 8;
  metadata.scaler = true;
  auto back = CheckpointMetadata::from_json(metadata.to_json(), "m.json");
  EXPECT_EQ(back.world_size, 2);
  EXPECT_EQ(back.models, 3);
  EXPECT_EQ(back.step, 17);
  EXPECT_EQ(back.optimizer_steps, 8);
  EXPECT_TRUE(back.scaler);
  EXPECT_THAT(error_of([] { CheckpointMetadata::from_json("{", "m.json"); }),
              HasSubstr("m.json: not valid JSON"));
  const std::string current = metadata.to_json();
  const std::string version = "\"format_version\": " + std::to_string(kCheckpointFormatVersion);
  ASSERT_NE(current.find(version), std::string::npos) << current;
  auto with_version = [&](int v) {
    std::string text = current;
    return text.replace(text.find(version), version.size(),
                        "\"format_version\": " + std::to_string(v));
  };
  EXPECT_EQ(kCheckpointFormatVersion, 2);
  EXPECT_EQ(CheckpointMetadata::from_json(with_version(1), "m.json").format_version, 1);
  EXPECT_THAT(error_of([&] { CheckpointMetadata::from_json(with_version(99), "m.json"); }),
              HasSubstr("m.json: checkpoint format version 99 is not supported"));
  TemporaryFolder tmp;
  fs::create_directories(fs::path(tmp.path()) / "half");
  EXPECT_THAT(error_of([&] { read_checkpoint_metadata(tmp.path() + "/half"); }),
              HasSubstr("half is not a complete accelerate-cpp checkpoint"));
  EXPECT_THAT(error_of([&] { read_checkpoint_metadata(tmp.path() + "/none"); }),
              HasSubstr("none does not exist"));
}

TEST(CheckpointStaging, WritesIntoStagingThenRenamesIntoPlace) {
  TemporaryFolder tmp;
  const fs::path target = fs::path(tmp.path()) / "run" / "ckpt";
  write_text(fs::path(tmp.path()) / "run" / ".ckpt.incomplete" / "stale", "old");  // leftover
  std::vector<std::string> stages;
  CheckpointOptions options;
  options.stage_observer(
      [&](CheckpointStage stage, const std::string&) { stages.push_back(to_string(stage)); });
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    StagedCheckpoint staged(*comm, target.string(), options, true);
    EXPECT_EQ(staged.staging_dir(), (fs::path(tmp.path()) / "run" / ".ckpt.incomplete").string());
    EXPECT_FALSE(fs::exists(fs::path(staged.staging_dir()) / "stale"));
    write_text(fs::path(staged.staging_dir()) / "model.safetensors", "weights");
    EXPECT_FALSE(fs::exists(target));
    CheckpointMetadata metadata;
    metadata.step = 5;
    staged.commit(metadata);
  });
  EXPECT_EQ(read_text(target / "model.safetensors"), "weights");
  EXPECT_EQ(read_checkpoint_metadata(target.string()).step, 5);
  EXPECT_FALSE(fs::exists(fs::path(tmp.path()) / "run" / ".ckpt.incomplete"));
  EXPECT_THAT(stages, ElementsAre("staged", "files_written", "metadata_written", "renamed"));
}

TEST(CheckpointStaging, ReplacesAnOldCheckpointButNotOtherFolders) {
  TemporaryFolder tmp;
  const fs::path target = fs::path(tmp.path()) / "ckpt";
  fake_checkpoint(target);
  write_text(target / "old_only", "x");
  const fs::path user = fs::path(tmp.path()) / "mine";
  write_text(user / "thesis.tex", "precious");
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    StagedCheckpoint staged(*comm, target.string(), {}, true);
    write_text(fs::path(staged.staging_dir()) / "new_only", "y");
    staged.commit(CheckpointMetadata());
    EXPECT_THAT(error_of([&] { StagedCheckpoint(*comm, user.string(), {}, true); }),
                HasSubstr("refusing to replace " + user.string()));
    EXPECT_THAT(error_of([&] { StagedCheckpoint(*comm, target.string(), {}, false); }),
                HasSubstr("checkpoint folder " + target.string() + " already exists"));
  });
  EXPECT_TRUE(fs::exists(target / "new_only"));
  EXPECT_FALSE(fs::exists(target / "old_only"));
  EXPECT_EQ(read_text(user / "thesis.tex"), "precious");
  EXPECT_FALSE(fs::exists(fs::path(tmp.path()) / ".ckpt.incomplete"));
}

TEST(CheckpointStaging, AnyRanksWriteErrorFailsEveryRankAndPublishesNothing) {
  TemporaryFolder tmp;
  const fs::path target = fs::path(tmp.path()) / "ckpt";
  std::vector<std::string> messages(2);
  testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    StagedCheckpoint staged(*comm, target.string(), {}, true);
    messages[comm->rank()] = error_of(
        [&] { staged.commit(CheckpointMetadata(), comm->rank() == 1 ? "disk full" : ""); });
  });
  for (const auto& message : messages) {
    EXPECT_THAT(message,
                HasSubstr("save_state to " + target.string() + " failed on rank 1: disk full"));
  }
  EXPECT_FALSE(fs::exists(target));
}

}  // namespace
}  // namespace accelerate
