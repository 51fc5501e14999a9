#include "cli/merge_checkpoint.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "accelerate/common/errors.h"
#include "checkpoint/checkpoint_files.h"
#include "cli/test_command.h"

namespace accelerate::cli {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointFiles;

bool is_listed(const std::vector<int64_t>& list, std::size_t index) {
  return std::find(list.begin(), list.end(), static_cast<int64_t>(index)) != list.end();
}

std::string optimizer_name(std::size_t index) { return "optimizer " + std::to_string(index); }

// The file names (in the checkpoint folder) the merge replaces: every
// model's, the sharded optimizers', and the metadata.
std::set<std::string> replaced_files(const std::string& dir, const CheckpointMetadata& metadata) {
  const CheckpointFiles files(dir);
  std::set<std::string> names = {files.metadata()};
  for (std::size_t i = 0; i < static_cast<std::size_t>(metadata.models); ++i) {
    names.insert(files.model(i));
    names.insert(files.model_pieces_index(i));
    for (int rank = 0; rank < metadata.world_size; ++rank) names.insert(files.model_piece(i, rank));
  }
  for (int64_t i : metadata.sharded_optimizers) {
    const auto index = static_cast<std::size_t>(i);
    names.insert(files.optimizer_partition(index));
    for (int rank = 0; rank < metadata.world_size; ++rank) {
      names.insert(files.optimizer_shard(index, rank));
      names.insert(CheckpointFiles::tensors_beside(files.optimizer_shard(index, rank)));
    }
  }
  std::set<std::string> base_names;
  for (const auto& path : names) base_names.insert(fs::path(path).filename().string());
  return base_names;
}

// Runs `argv` and waits; its stderr, on one line, when it fails.
std::string run_helper(const std::vector<std::string>& argv) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    const std::string message = argv[0] + ": cannot run: " + std::strerror(errno) + "\n";
    (void)!::write(STDERR_FILENO, message.data(), message.size());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  std::string err;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(pipe_fds[0], buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    err.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
  std::replace(err.begin(), err.end(), '\n', ' ');
  if (err.empty()) err = argv[0] + " failed (status " + std::to_string(status) + ")";
  return err;
}

}  // namespace

std::string check_optimizer_files(const std::string& checkpoint_dir,
                                  const CheckpointMetadata& metadata) {
  const CheckpointFiles files(checkpoint_dir);
  if (metadata.world_size > 1 && metadata.sharded_optimizers.empty()) {
    // load_state resumes such a checkpoint on its own number of processes
    // only: nothing here would let one process resume it.
    throw Error("--include_optimizer: checkpoint " + checkpoint_dir + " was saved by " +
                std::to_string(metadata.world_size) +
                " processes without ZeRO (its optimizer state is whole already, and its random "
                "states and loader positions are per process): resume it on " +
                std::to_string(metadata.world_size) + " processes");
  }
  if (metadata.tensor_parallel_size > 1 && !metadata.sharded_optimizers.empty()) {
    throw Error("--include_optimizer: checkpoint " + checkpoint_dir + " was saved at tp_size " +
                std::to_string(metadata.tensor_parallel_size) +
                " with ZeRO, each tensor-parallel rank's optimizer shards apart; merging them "
                "is not built: resume it with load_state at any tp and dp");
  }
  const int saved_by = metadata.shards_saved_by();
  for (int64_t i = 0; i < metadata.optimizers; ++i) {
    const auto index = static_cast<std::size_t>(i);
    std::vector<std::pair<std::string, std::string>> needed;  // path, what it holds
    if (is_listed(metadata.sharded_optimizers, index)) {
      needed.emplace_back(files.optimizer_partition(index),
                          "how the shards of " + optimizer_name(index) + " cut its parameters");
      for (int rank = 0; rank < saved_by; ++rank) {
        const std::string what =
            "process " + std::to_string(rank) + "'s shard of " + optimizer_name(index);
        needed.emplace_back(files.optimizer_shard(index, rank), what);
        needed.emplace_back(CheckpointFiles::tensors_beside(files.optimizer_shard(index, rank)),
                            what + ", its state tensors");
      }
    } else {
      needed.emplace_back(files.optimizer(index), "the state of " + optimizer_name(index));
    }
    for (const auto& [path, what] : needed) {
      std::error_code error;
      if (!fs::is_regular_file(path, error)) {
        throw Error("checkpoint file " + path + " is missing (" + what + ")");
      }
    }
  }
  const auto helper = find_helper_program(current_executable_path(), kOptimizerMergeProgram);
  if (!helper && !metadata.sharded_optimizers.empty()) {
    std::string looked;
    for (const auto& candidate :
         helper_program_candidates(current_executable_path(), kOptimizerMergeProgram)) {
      looked += (looked.empty() ? "" : ", ") + candidate;
    }
    throw Error(std::string("--include_optimizer needs the program ") + kOptimizerMergeProgram +
                " (LibTorch reads the optimizer archives), not found at " + looked +
                "; build the target 'accelerate_merge_optimizer' or reinstall accelerate-cpp");
  }
  return helper.value_or("");
}

void write_checkpoint_rest(const std::string& checkpoint_dir, const CheckpointMetadata& metadata,
                           const std::string& helper, const std::string& staging) {
  const std::set<std::string> replaced = replaced_files(checkpoint_dir, metadata);
  for (const auto& entry : fs::directory_iterator(checkpoint_dir)) {
    const std::string name = entry.path().filename().string();
    if (replaced.count(name) > 0) continue;
    std::error_code error;
    fs::copy(entry.path(), fs::path(staging) / name, fs::copy_options::recursive, error);
    if (error) {
      throw Error("cannot copy " + entry.path().string() + " to " + staging + ": " +
                  error.message());
    }
  }
  for (int64_t index : metadata.sharded_optimizers) {
    const std::string problem = run_helper({helper, checkpoint_dir, std::to_string(index),
                                            std::to_string(metadata.shards_saved_by()), staging});
    if (!problem.empty()) throw Error(problem);
  }
  CheckpointMetadata merged = metadata;
  merged.sharded_models.clear();  // written whole
  // The optimizers' shards are now one process's: the "one copy of the
  // shards" of hybrid sharding, cut for 1 (so that the loader positions and
  // random states of the world_size processes still rescale on load).
  merged.shard_world_size = !merged.sharded_optimizers.empty() && merged.world_size > 1 ? 1 : 0;
  checkpoint::write_text_file(CheckpointFiles(staging).metadata(), merged.to_json());
}

}  // namespace accelerate::cli
