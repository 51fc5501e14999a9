// Checkpoint folders: staging and atomic rename, numbered checkpoints, pruning.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "accelerate/checkpoint/checkpointing.h"
#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"
#include "accelerate/distributed/communicator.h"
#include "checkpoint/checkpoint_archives.h"
#include "checkpoint/checkpoint_files.h"

namespace accelerate {
namespace fs = std::filesystem;

namespace {

constexpr const char* kStagingSuffix = ".incomplete";
constexpr const char* kReplacedSuffix = ".replaced";
constexpr const char* kDeletingSuffix = ".deleting";

// ".{name}{suffix}" beside `path`: hidden, and never "checkpoint_N".
std::string sibling(const fs::path& path, const char* suffix) {
  return (path.parent_path() / ("." + path.filename().string() + suffix)).string();
}

std::string system_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(system_error("cannot open", path));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (rc != 0) throw Error(system_error("cannot sync", path));
}

void sync_tree(const fs::path& root) {
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file()) fsync_path(entry.path().string(), false);
    if (entry.is_directory()) fsync_path(entry.path().string(), true);
  }
  fsync_path(root.string(), true);
}

void remove_tree(const std::string& path) {
  std::error_code error;
  fs::remove_all(path, error);
  if (error) throw Error("cannot delete " + path + ": " + error.message());
}

// Moves `staging` to `final_dir`; an existing `final_dir` is swapped out
// atomically where the filesystem can (renameat2 RENAME_EXCHANGE), so
// `final_dir` always names a complete checkpoint.
void move_into_place(const std::string& staging, const std::string& final_dir) {
  std::error_code error;
  if (!fs::exists(final_dir, error)) {
    if (::rename(staging.c_str(), final_dir.c_str()) != 0) {
      throw Error(system_error("cannot rename " + staging + " to", final_dir));
    }
    return;
  }
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    remove_tree(staging);  // now the old checkpoint
    return;
  }
  // No exchange here (some filesystems): two renames; in between, the old
  // checkpoint is at ".name.replaced".
  const std::string replaced = sibling(final_dir, kReplacedSuffix);
  remove_tree(replaced);
  if (::rename(final_dir.c_str(), replaced.c_str()) != 0) {
    throw Error(system_error("cannot move the old checkpoint aside:", final_dir));
  }
  if (::rename(staging.c_str(), final_dir.c_str()) != 0) {
    throw Error(system_error("cannot rename " + staging + " to", final_dir));
  }
  remove_tree(replaced);
}

}  // namespace

const char* to_string(CheckpointStage stage) {
  static constexpr detail::EnumName<CheckpointStage> kCheckpointStageNames[] = {
      {CheckpointStage::kStaged, "staged"},
      {CheckpointStage::kFilesWritten, "files_written"},
      {CheckpointStage::kMetadataWritten, "metadata_written"},
      {CheckpointStage::kRenamed, "renamed"},
      {CheckpointStage::kPruned, "pruned"}};
  static_assert(detail::names_are_distinct(kCheckpointStageNames));
  return detail::enum_name(kCheckpointStageNames, stage, "unknown");
}

std::string checkpoint_folder_name(int64_t iteration) {
  return "checkpoint_" + std::to_string(iteration);
}

std::optional<int64_t> checkpoint_number(const std::string& folder_name) {
  static const std::string prefix = "checkpoint_";
  if (folder_name.size() <= prefix.size() || folder_name.compare(0, prefix.size(), prefix) != 0 ||
      folder_name.size() > prefix.size() + 18) {
    return std::nullopt;
  }
  const std::string digits = folder_name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

namespace {
std::vector<std::pair<int64_t, std::string>> numbered(const std::string& checkpoints_dir,
                                                      bool complete_only) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code error;
  if (!fs::is_directory(checkpoints_dir, error)) return found;
  for (const auto& entry : fs::directory_iterator(checkpoints_dir, error)) {
    auto number = checkpoint_number(entry.path().filename().string());
    if (!number || !entry.is_directory()) continue;
    if (complete_only && !is_complete_checkpoint(entry.path().string())) continue;
    found.emplace_back(*number, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}
}  // namespace

std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::string> paths;
  for (auto& [number, path] : numbered(checkpoints_dir, true)) paths.push_back(path);
  return paths;
}

std::optional<std::string> latest_checkpoint(const std::string& checkpoints_dir) {
  auto all = list_checkpoints(checkpoints_dir);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::vector<std::string> prune_checkpoints(const std::string& checkpoints_dir, int64_t keep) {
  std::vector<std::string> deleted;
  std::error_code error;
  // Leftovers of deletions that were interrupted.
  for (const auto& entry : fs::directory_iterator(checkpoints_dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > std::strlen(kDeletingSuffix) && name[0] == '.' &&
        name.compare(name.size() - std::strlen(kDeletingSuffix), std::string::npos,
                     kDeletingSuffix) == 0) {
      remove_tree(entry.path().string());
    }
  }
  // Incomplete numbered folders count too: they are no use to anyone.
  auto all = numbered(checkpoints_dir, false);
  const int64_t excess = static_cast<int64_t>(all.size()) - std::max<int64_t>(keep, 0);
  for (int64_t i = 0; i < excess; ++i) {
    const std::string& path = all[i].second;
    const std::string doomed = sibling(path, kDeletingSuffix);
    remove_tree(doomed);
    if (::rename(path.c_str(), doomed.c_str()) != 0) {
      throw Error(system_error("cannot delete old checkpoint", path));
    }
    remove_tree(doomed);
    deleted.push_back(path);
  }
  return deleted;
}

// ---- StagedCheckpoint ----------------------------------------------------------

StagedCheckpoint::StagedCheckpoint(Communicator& comm, std::string final_dir,
                                   CheckpointOptions options, bool allow_replace)
    : comm_(comm), options_(std::move(options)) {
  fs::path final_path = fs::absolute(fs::path(final_dir)).lexically_normal();
  if (!final_path.has_filename()) final_path = final_path.parent_path();
  final_dir_ = final_path.string();
  staging_dir_ = sibling(final_path, kStagingSuffix);
  std::string error;
  if (comm_.job().is_main_process()) {
    try {
      std::error_code ec;
      if (fs::exists(final_path, ec)) {
        if (!fs::is_directory(final_path, ec)) {
          throw Error(final_dir_ + " exists and is not a folder");
        }
        if (!allow_replace) {
          throw Error("checkpoint folder " + final_dir_ +
                      " already exists; set project_config.iteration past it, or load_state() "
                      "first to continue numbering after it");
        }
        if (!is_complete_checkpoint(final_dir_) && !fs::is_empty(final_path, ec)) {
          throw Error("refusing to replace " + final_dir_ +
                      ": it is not empty and not an accelerate-cpp checkpoint (no " +
                      kCheckpointMetadataFile + ")");
        }
      }
      remove_tree(staging_dir_);  // a save that was interrupted
      fs::create_directories(staging_dir_, ec);
      if (ec) throw Error("cannot create " + staging_dir_ + ": " + ec.message());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  checkpoint::agree(comm_, error, "save_state to " + final_dir_);
  notify(CheckpointStage::kStaged, staging_dir_);
}

void StagedCheckpoint::notify(CheckpointStage stage, const std::string& directory) const {
  if (options_.stage_observer()) options_.stage_observer()(stage, directory);
}

void StagedCheckpoint::commit(const CheckpointMetadata& metadata, const std::string& local_error) {
  checkpoint::agree(comm_, local_error, "save_state to " + final_dir_);
  notify(CheckpointStage::kFilesWritten, staging_dir_);
  std::string error;
  if (comm_.job().is_main_process()) {
    try {
      const std::string path = checkpoint::CheckpointFiles(staging_dir_).metadata();
      checkpoint::write_text_file(path, metadata.to_json());
      if (options_.sync_to_disk()) sync_tree(staging_dir_);
      notify(CheckpointStage::kMetadataWritten, staging_dir_);
      move_into_place(staging_dir_, final_dir_);
      if (options_.sync_to_disk()) fsync_path(fs::path(final_dir_).parent_path().string(), true);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  checkpoint::agree(comm_, error, "save_state to " + final_dir_);
  notify(CheckpointStage::kRenamed, final_dir_);
}

}  // namespace accelerate
