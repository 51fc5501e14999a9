// `accelerate merge-weights` streams: merging a synthetic 1 GiB checkpoint
// of two processes' pieces (16 tensors of 64 MiB, each cut between the two
// files) keeps the command's peak resident memory (the kernel's VmHWM,
// reported as ru_maxrss when it exits) under the largest tensor + 64 MiB.
// The rank files are sparse, so the test costs the merge's own writes.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "accelerate/detail/checkpoint_metadata.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/model_pieces_index.h"
#include "checkpoint/safetensors_header.h"
#include "checkpoint/safetensors_io.h"
#include "checkpoint/safetensors_layout.h"
#include "checkpoint/safetensors_sharding.h"
#include "support/process_runner.h"

namespace merge_weights_memory_test {

namespace fs = std::filesystem;
using accelerate::checkpoint::CheckpointFiles;

constexpr int kTensors = 16;
constexpr int64_t kElements = int64_t{16} << 20;  // 64 MiB of F32 each
constexpr int64_t kHalf = kElements / 2;

void write_synthetic_checkpoint(const std::string& folder) {
  fs::create_directories(folder);
  const CheckpointFiles files(folder);
  accelerate::CheckpointMetadata metadata;
  metadata.world_size = 2;
  metadata.models = 1;
  metadata.sharded_models = {0};
  accelerate::checkpoint::write_text_file(files.metadata(), metadata.to_json());

  accelerate::checkpoint::ModelPiecesIndex index;
  index.world_size = 2;
  std::vector<accelerate::safetensors::TensorSpec> pieces;
  for (int i = 0; i < kTensors; ++i) {
    const std::string name = "layers." + std::to_string(i) + ".weight";
    index.tensors.push_back({name, "F32", {4096, 4096}, {{0, 0, kHalf}, {1, kHalf, kHalf}}});
    pieces.push_back({name, "F32", {kHalf}});
  }
  accelerate::checkpoint::write_text_file(files.model_pieces_index(0), index.to_json());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = files.model_piece(0, rank);
    const auto layout = accelerate::safetensors::layout_file(path, pieces, {{"format", "pt"}});
    auto file = accelerate::safetensors::File::open_write(path);
    file.write_all(layout.prefix.data(), layout.prefix.size());
    file.close();
    // The data as a hole: reads as zeros without being written.
    fs::resize_file(path, layout.prefix.size() + uint64_t{kTensors} * kHalf * 4);
  }
}

struct Exit {
  int status = -1;
  long peak_kib = 0;  // ru_maxrss
};

Exit run_with_rusage(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Exit exit;
  int status = 0;
  struct rusage usage {};
  if (::wait4(pid, &status, 0, &usage) == pid && WIFEXITED(status))
    exit.status = WEXITSTATUS(status);
  exit.peak_kib = usage.ru_maxrss;
  return exit;
}

TEST(MergeWeightsMemory, PeakResidentMemoryIsTheLargestTensorPlus64MiBAtMost) {
  accelerate::testing::TemporaryFolder dir;
  const std::string checkpoint = dir.path() + "/checkpoint", output = dir.path() + "/merged";
  write_synthetic_checkpoint(checkpoint);
  const Exit exit = run_with_rusage(
      {ACCELERATE_CLI_PATH, "merge-weights", checkpoint, output, "--max_shard_size", "300MB"});
  ASSERT_EQ(exit.status, 0);
  RecordProperty("peak_resident_kib", std::to_string(exit.peak_kib));
  const long largest_kib = kElements * 4 / 1024;
  EXPECT_LE(exit.peak_kib, largest_kib + 64 * 1024) << "peak resident memory in KiB";

  // 1 GiB in four files of four tensors and the index.
  const auto index = accelerate::safetensors::read_index(output + "/model.safetensors.index.json");
  EXPECT_EQ(index.total_size, uint64_t{kTensors} * kElements * 4);
  EXPECT_EQ(index.files.size(), 4u);
  uint64_t data = 0;
  for (const auto& file : index.files) {
    const auto header = accelerate::safetensors::read_header(output + "/" + file);
    data += header.file_size - header.data_offset;
  }
  EXPECT_EQ(data, index.total_size);
}

}  // namespace merge_weights_memory_test
