// The pieces of Accelerator::save_state / load_state that stand alone:
// crash-safe checkpoint folders, finding the newest complete checkpoint,
// pruning old ones, the metadata file, and the type-erased objects and hooks
// the Accelerator keeps. The layout and the file format are described in
// docs/checkpoint-format.md.
//
// Crash safety: every process writes into a staging folder next to the
// target (".checkpoint_3.incomplete"); when all have finished, the main
// process writes accelerate_checkpoint.json last and renames the folder into
// place. A folder without that file is never loaded or chosen as "newest",
// so killing any process at any moment of a save leaves the previous
// checkpoint intact and the incomplete one ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/checkpoint/project_configuration.h"
#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/arg.h"
#include "accelerate/detail/checkpoint_metadata.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace serialize {
class InputArchive;
class OutputArchive;
}  // namespace serialize
}  // namespace torch

namespace accelerate {

class Communicator;

// Points of a save, in order, reported to CheckpointOptions::stage_observer.
enum class CheckpointStage {
  kStaged,           // every process: the staging folder exists, nothing written yet
  kFilesWritten,     // every process: all processes' files are written
  kMetadataWritten,  // main process: metadata written, folder not yet renamed
  kRenamed,          // every process: the checkpoint is complete and in place
  kPruned,           // main process: checkpoints beyond total_limit are gone
};
const char* to_string(CheckpointStage stage);
using CheckpointStageObserver =
    std::function<void(CheckpointStage stage, const std::string& directory)>;

struct CheckpointOptions {
  // fsync every file and folder of a checkpoint before it is renamed into
  // place, so a power failure cannot leave a "complete" checkpoint with
  // missing data. false: survives killed processes but not power loss.
  ACCELERATE_ARG(bool, sync_to_disk) = true;
  // Called at each CheckpointStage (progress reporting; fault-injection
  // tests kill a process here).
  ACCELERATE_ARG(CheckpointStageObserver, stage_observer);
};

// ---- Numbered checkpoints ({project_dir}/checkpoints/checkpoint_N) ----------
std::string checkpoint_folder_name(int64_t iteration);
// N for "checkpoint_N", else nullopt.
std::optional<int64_t> checkpoint_number(const std::string& folder_name);
// Complete numbered checkpoints in `checkpoints_dir`, oldest (lowest N) first.
std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir);
std::optional<std::string> latest_checkpoint(const std::string& checkpoints_dir);
// Deletes the oldest checkpoints until `keep` remain (and leftovers of
// interrupted saves and deletions). Each is renamed away before it is
// deleted, so a half-deleted folder never looks like a checkpoint. Returns
// the folders deleted. Main process only.
std::vector<std::string> prune_checkpoints(const std::string& checkpoints_dir, int64_t keep);

// ---- Staging ----------------------------------------------------------------
// One save in progress. Both calls are collective (every process of `comm`).
class StagedCheckpoint {
 public:
  // The main process empties a leftover staging folder and creates a fresh
  // one. If `final_dir` exists: replaced when `allow_replace` and it is a
  // checkpoint or empty, else Error (thrown on every process).
  StagedCheckpoint(Communicator& comm, std::string final_dir, CheckpointOptions options,
                   bool allow_replace);
  const std::string& staging_dir() const { return staging_dir_; }
  const std::string& final_dir() const { return final_dir_; }

  // Every process passes "" or the error its writes failed with; if any
  // failed, every process throws Error naming the rank. Otherwise the main
  // process syncs, writes the metadata and renames the folder into place
  // (atomically exchanging it with an older checkpoint of the same name).
  void commit(const CheckpointMetadata& metadata, const std::string& local_error = "");

 private:
  void notify(CheckpointStage stage, const std::string& directory) const;
  Communicator& comm_;
  std::string final_dir_;
  std::string staging_dir_;
  CheckpointOptions options_;
};

// ---- Objects registered with register_for_checkpointing --------------------
struct CheckpointObject {
  std::function<void(torch::serialize::OutputArchive&)> save;
  std::function<void(torch::serialize::InputArchive&)> load;
};

namespace detail {
template <class T, class = void>
struct has_archive_members : std::false_type {};
template <class T>
struct has_archive_members<T, std::void_t<decltype(std::declval<const T&>().save(
                                              std::declval<torch::serialize::OutputArchive&>())),
                                          decltype(std::declval<T&>().load(
                                              std::declval<torch::serialize::InputArchive&>()))>>
    : std::true_type {};
// Holders (torch::nn::ModuleHolder, shared_ptr) whose pointee has them.
template <class T, class = void>
struct has_archive_members_via_arrow : std::false_type {};
template <class T>
struct has_archive_members_via_arrow<
    T, std::void_t<
           decltype(std::declval<T&>()->save(std::declval<torch::serialize::OutputArchive&>())),
           decltype(std::declval<T&>()->load(std::declval<torch::serialize::InputArchive&>()))>>
    : std::true_type {};
}  // namespace detail

// Anything with save(OutputArchive&) const and load(InputArchive&): torch
// modules (or their holders), torch optimizers, GradScaler, your own types.
// The object must outlive the Accelerator it is registered with.
template <class T>
CheckpointObject make_checkpoint_object(T& object) {
  if constexpr (detail::has_archive_members<T>::value) {
    return {[&object](torch::serialize::OutputArchive& a) { object.save(a); },
            [&object](torch::serialize::InputArchive& a) { object.load(a); }};
  } else {
    static_assert(detail::has_archive_members_via_arrow<T>::value,
                  "register_for_checkpointing needs save(torch::serialize::OutputArchive&) const "
                  "and load(torch::serialize::InputArchive&), e.g. a torch module or optimizer");
    return {[&object](torch::serialize::OutputArchive& a) { object->save(a); },
            [&object](torch::serialize::InputArchive& a) { object->load(a); }};
  }
}

// ---- Save / load pre-hooks ----------------------------------------------------
// Accelerate's register_save_state_pre_hook(hook(models, weights, output_dir)):
// called on every process before anything is saved, with the prepared models
// and their state dicts (weights[i] belongs to models[i]). A hook may edit the
// weights, or erase entries from both lists (the model is then not saved as
// model_{i}.safetensors; save it yourself into output_dir). output_dir is the
// staging folder: files written there become part of the checkpoint.
using SaveStatePreHook =
    std::function<void(std::vector<torch::nn::Module*>& models, std::vector<NamedTensors>& weights,
                       const std::string& output_dir)>;
// register_load_state_pre_hook(hook(models, input_dir)): called on every
// process before anything is loaded. Models it erases are not loaded.
using LoadStatePreHook =
    std::function<void(std::vector<torch::nn::Module*>& models, const std::string& input_dir)>;

// Hooks in registration order; a HookHandle removes its hook.
template <class Hook>
class HookRegistry {
 public:
  size_t add(Hook hook) {
    hooks_.emplace(next_id_, std::move(hook));
    return next_id_++;
  }
  void remove(size_t id) { hooks_.erase(id); }
  const std::map<size_t, Hook>& hooks() const { return hooks_; }

 private:
  std::map<size_t, Hook> hooks_;
  size_t next_id_ = 0;
};

// The save/load pre-hooks of one Accelerator, shared with the HookHandles
// that remove them (which may outlive it).
struct StatePreHooks {
  std::shared_ptr<HookRegistry<SaveStatePreHook>> save =
      std::make_shared<HookRegistry<SaveStatePreHook>>();
  std::shared_ptr<HookRegistry<LoadStatePreHook>> load =
      std::make_shared<HookRegistry<LoadStatePreHook>>();
};

// Accelerate's RemovableHandle. Removing twice, or after the Accelerator is
// gone, does nothing.
class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(std::function<void()> remover)
      : remover_(std::make_shared<std::function<void()>>(std::move(remover))) {}
  void remove() {
    if (remover_ && *remover_) (*remover_)();
    remover_.reset();
  }

 private:
  std::shared_ptr<std::function<void()>> remover_;
};

}  // namespace accelerate
