// Accelerator: save_state / load_state / save_model (checkpoint area).
// The folder mechanics (staging, rename, pruning) are in checkpointing.h,
// the file names in checkpoint/checkpoint_files.h, and what each prepared
// object writes and reads back in its item (checkpoint/checkpoint_items.h:
// the models' and optimizers' from the engine that trains them, the random
// states' from accelerator/state_items.h); here they are put together
// (docs/checkpoint-format.md).
#include <torch/serialize/archive.h>

#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "accelerate/precision/grad_scaler.h"
#include "accelerator/state_items.h"
#include "accelerator/tensor_parallel_split.h"
#include "checkpoint/checkpoint_archives.h"
#include "checkpoint/checkpoint_items.h"
#include "checkpoint/model_streaming.h"
#include "parallel/parallel_engine.h"

namespace accelerate {
namespace fs = std::filesystem;

namespace {

using checkpoint::CheckpointItems;

// Adds `hook`; the handle removes it, and does nothing once the registry
// (owned by the Accelerator) is gone.
template <class Hook>
HookHandle add_hook(const std::shared_ptr<HookRegistry<Hook>>& registry, Hook hook) {
  const size_t id = registry->add(std::move(hook));
  std::weak_ptr<HookRegistry<Hook>> weak = registry;
  return HookHandle([weak, id] {
    if (auto alive = weak.lock()) alive->remove(id);
  });
}

// What a checkpoint's items are made of: the prepared objects, in prepare() order.
struct PreparedState {
  ParallelEngine& engine;
  std::vector<torch::nn::Module*> models;  // as the pre-hooks left them
  const std::vector<torch::nn::Module*>& prepared_models;
  const std::vector<torch::optim::Optimizer*>& optimizers;
  const std::vector<PreparedSchedulerBase*>& schedulers;
  const std::shared_ptr<GradScaler>& scaler;
  const std::vector<CheckpointObject>& custom_objects;
  const std::vector<DataLoaderBase*>& loaders;
  const TensorParallelParts* tensor_parallel_parts;  // null: none split
};

// Every item, in the order they are written and applied. `weights` (save
// only): each model's, as the pre-hooks left them.
CheckpointItems items_of(const PreparedState& state, const checkpoint::CheckpointFiles& files,
                         std::vector<NamedTensors> weights, bool by_groups) {
  CheckpointItems items;
  for (size_t i = 0; i < state.models.size(); ++i) {
    items.push_back(state.engine.model_item(
        *state.models[i], i, i < weights.size() ? std::move(weights[i]) : NamedTensors(),
        by_groups));
  }
  FindTensorParallelPart find_part;
  if (const TensorParallelParts* parts = state.tensor_parallel_parts) {
    find_part = [parts](const at::Tensor& parameter) { return parts->find(parameter); };
  }
  for (size_t i = 0; i < state.optimizers.size(); ++i) {
    items.push_back(
        state.engine.optimizer_item(*state.optimizers[i], i, state.prepared_models, find_part));
  }
  for (size_t i = 0; i < state.schedulers.size(); ++i) {
    PreparedSchedulerBase* scheduler = state.schedulers[i];
    items.push_back(checkpoint::archive_item(
        files.scheduler(i), [scheduler](auto& archive) { scheduler->save(archive); },
        [scheduler](auto& archive) { scheduler->load(archive); }));
  }
  if (GradScaler* scaler = state.scaler.get()) {
    items.push_back(checkpoint::archive_item(
        files.scaler(), [scaler](auto& archive) { scaler->save(archive); },
        [scaler](auto& archive) { scaler->load(archive); }));
  }
  for (size_t i = 0; i < state.custom_objects.size(); ++i) {
    const CheckpointObject& object = state.custom_objects[i];
    items.push_back(checkpoint::archive_item(files.custom_object(i), object.save, object.load));
  }
  items.push_back(random_states_item(state.loaders));
  return items;
}

}  // namespace

// save_state's and load_state's parts that read the Accelerator's private
// state (a friend of it).
class AcceleratorCheckpointing {
 public:
  static PreparedState prepared_state(Accelerator& a) {
    return PreparedState{*a.engine_,
                         a.prepared_modules_,
                         a.prepared_modules_,
                         a.prepared_optimizers_,
                         a.prepared_schedulers_,
                         a.scaler_,
                         a.custom_objects_,
                         a.loaders_,
                         a.tensor_parallel_parts_.get()};
  }

  static checkpoint::ItemContext item_context(const Accelerator& a,
                                              const checkpoint::CheckpointFiles& files,
                                              const CheckpointMetadata* metadata) {
    checkpoint::ItemContext context{files, a.process_index(), a.num_processes(),
                                    a.options_.checkpoint_options().sync_to_disk(), metadata};
    const ParallelEngine::ShardPlace place =
        a.engine_->shard_place(a.process_index(), a.num_processes());
    context.shard_rank = place.rank;
    context.shard_world_size = place.world_size;
    context.writes_shards = place.writes;
    context.tensor_parallel_rank = a.tensor_parallel_.rank();
    context.tensor_parallel_size = a.tensor_parallel_.size();
    return context;
  }

  static CheckpointMetadata metadata(const Accelerator& a) {
    CheckpointMetadata metadata;
    metadata.world_size = a.num_processes();
    const int shard_world = a.engine_->shard_place(a.process_index(), a.num_processes()).world_size;
    if (shard_world != a.num_processes()) metadata.shard_world_size = shard_world;
    metadata.tensor_parallel_size = a.tensor_parallel_.size();
    metadata.models = static_cast<int64_t>(a.prepared_modules_.size());
    metadata.optimizers = static_cast<int64_t>(a.prepared_optimizers_.size());
    metadata.schedulers = static_cast<int64_t>(a.prepared_schedulers_.size());
    metadata.dataloaders = static_cast<int64_t>(a.loaders_.size());
    metadata.custom_objects = static_cast<int64_t>(a.custom_objects_.size());
    metadata.scaler = a.scaler_ != nullptr;
    metadata.step = a.step_;
    metadata.optimizer_steps = a.gradient_state_->optimizer_steps();
    return metadata;
  }

  // The checkpoint holds what this Accelerator prepared, kind by kind.
  static void check_counts(const Accelerator& a, const std::string& folder,
                           const CheckpointMetadata& saved) {
    checkpoint::require_count(folder, "models", saved.models, a.prepared_modules_.size());
    checkpoint::require_count(folder, "optimizers", saved.optimizers,
                              a.prepared_optimizers_.size());
    checkpoint::require_count(folder, "schedulers", saved.schedulers,
                              a.prepared_schedulers_.size());
    checkpoint::require_count(folder, "data loaders", saved.dataloaders, a.loaders_.size());
    checkpoint::require_count(folder, "registered objects", saved.custom_objects,
                              a.custom_objects_.size());
    if (saved.scaler != (a.scaler_ != nullptr)) {
      throw Error("checkpoint " + folder + (saved.scaler ? " has" : " has no") +
                  " scaler.pt but this Accelerator " + (a.scaler_ ? "uses" : "does not use") +
                  " fp16 loss scaling");
    }
  }

  // {project_dir}/checkpoints/checkpoint_{iteration}, with automatic naming.
  static std::string next_folder(const Accelerator& a) {
    const ProjectConfiguration& config = a.project_config_;
    if (!config.automatic_checkpoint_naming()) {
      throw ConfigError(
          "save_state() needs a folder, or project_config.automatic_checkpoint_naming with a "
          "project_dir");
    }
    if (!config.project_dir()) {
      throw ConfigError("project_config.automatic_checkpoint_naming needs a project_dir");
    }
    return (fs::path(checkpoint::checkpoints_folder(*config.project_dir())) /
            checkpoint_folder_name(config.iteration()))
        .string();
  }

  // After an automatically named checkpoint: the next number, and the
  // oldest checkpoints beyond total_limit deleted.
  static void finish_numbered(Accelerator& a, const std::string& final_dir) {
    ProjectConfiguration& config = a.project_config_;
    config.iteration(config.iteration() + 1);
    if (!config.total_limit() || !a.is_main_process()) return;
    // After commit's final collective: no process is still writing.
    const std::string checkpoints = fs::path(final_dir).parent_path().string();
    try {
      prune_checkpoints(checkpoints, *config.total_limit());
    } catch (const std::exception& e) {
      // The new checkpoint is safe; only the cleanup failed.
      std::cerr << "accelerate: warning: could not delete old checkpoints: " << e.what() << "\n";
    }
    if (const auto& observer = a.options_.checkpoint_options().stage_observer()) {
      observer(CheckpointStage::kPruned, checkpoints);
    }
  }
};

using Parts = AcceleratorCheckpointing;

ProjectConfiguration Accelerator::resolve_project_config(const AcceleratorOptions& options) {
  ProjectConfiguration config = options.project_config();
  if (options.project_dir()) config.project_dir(*options.project_dir());
  if (config.total_limit() && *config.total_limit() < 1) {
    throw ConfigError("project_config.total_limit must be at least 1 (got " +
                      std::to_string(*config.total_limit()) + ")");
  }
  return config;
}

HookHandle Accelerator::register_save_state_pre_hook(SaveStatePreHook hook) {
  return add_hook(state_pre_hooks_.save, std::move(hook));
}

HookHandle Accelerator::register_load_state_pre_hook(LoadStatePreHook hook) {
  return add_hook(state_pre_hooks_.load, std::move(hook));
}

void Accelerator::check_save_state() const {
  check_tensor_parallel_checkpoint(prepared_optimizers_, tensor_parallel_, "save_state");
}

std::string Accelerator::save_state(const std::optional<std::string>& output_dir) {
  // Low-precision gathers: the checkpoint holds the fp32 masters (before
  // tensor-parallel parts are gathered whole from them).
  const ScopeGuard exact_weights = engine_->exact_weights();
  // Tensor-parallel parts and their optimizer state are saved whole (ZeRO's
  // optimizer shards by each tp rank), so that any tp (and dp) resumes.
  const ScopeGuard whole = whole_tensor_parallel_checkpoint(
      prepared_modules_, prepared_optimizers_, *engine_, tensor_parallel_, "save_state",
      /*loading=*/false);
  const bool numbered = !output_dir;
  StagedCheckpoint staged(*comm_, numbered ? Parts::next_folder(*this) : *output_dir,
                          options_.checkpoint_options(), /*allow_replace=*/!numbered);
  const checkpoint::CheckpointFiles files(staged.staging_dir());
  // Sharded weights (ZeRO-3) are written group by group, so that no process
  // holds a whole model, unless a pre-hook may replace the weights.
  const bool by_groups = state_pre_hooks_.save->hooks().empty();
  std::optional<ScopeGuard> full_weights;
  if (!by_groups) full_weights.emplace(engine_->full_weights());
  std::string error;
  CheckpointItems items;
  try {
    PreparedState state = Parts::prepared_state(*this);
    std::vector<NamedTensors> weights;
    for (auto* model : state.models) weights.push_back(module_state_dict(*model));
    for (auto& [id, hook] : state_pre_hooks_.save->hooks())
      hook(state.models, weights, files.folder());
    if (state.models.size() != weights.size()) {
      throw Error("a save_state pre-hook left " + std::to_string(state.models.size()) +
                  " models but " + std::to_string(weights.size()) + " weights");
    }
    items = items_of(state, files, std::move(weights), by_groups);
    error = checkpoint::write_items(items, Parts::item_context(*this, files, nullptr));
  } catch (const std::exception& e) {
    error = e.what();
  }
  CheckpointMetadata metadata = Parts::metadata(*this);
  for (const auto& item : items) item->describe(metadata);
  staged.commit(metadata, error);
  if (numbered) Parts::finish_numbered(*this, staged.final_dir());
  return staged.final_dir();
}

std::string Accelerator::load_state(const std::optional<std::string>& input_dir) {
  std::string folder;
  if (input_dir) {
    folder = *input_dir;
  } else {
    if (!project_config_.project_dir()) {
      throw ConfigError(
          "load_state() needs a folder, or a project_dir whose checkpoints/ holds one");
    }
    const std::string checkpoints = checkpoint::checkpoints_folder(*project_config_.project_dir());
    auto latest = latest_checkpoint(checkpoints);
    if (!latest) throw Error("no complete checkpoint in " + checkpoints);
    folder = *latest;
  }
  restore_state_from(folder);
  // Continue numbering after the checkpoint we resumed from.
  if (auto number = checkpoint_number(fs::path(folder).lexically_normal().filename().string())) {
    if (project_config_.automatic_checkpoint_naming()) project_config_.iteration(*number + 1);
  }
  return folder;
}

void Accelerator::restore_state_from(const std::string& folder) {
  const CheckpointMetadata metadata = read_checkpoint_metadata(folder);
  // ZeRO checkpoints load on another number of processes (resharded); for
  // others the per-process random states and positions must match.
  const bool other_world = metadata.world_size != num_processes();
  if (other_world && metadata.sharded_optimizers.empty()) {
    throw Error("checkpoint " + folder + " was saved by " + std::to_string(metadata.world_size) +
                " processes but this job has " + std::to_string(num_processes()) +
                " (random states and loader positions are per process)");
  }
  const checkpoint::CheckpointFiles files(folder);
  const checkpoint::ItemContext context = Parts::item_context(*this, files, &metadata);
  // Whole while the whole tensors are read, then each process's parts of them.
  std::optional<ScopeGuard> whole(whole_tensor_parallel_checkpoint(
      prepared_modules_, prepared_optimizers_, *engine_, tensor_parallel_, "load_state",
      /*loading=*/true));
  CheckpointItems items;
  // Every item is read and checked before anything changes, and every
  // process learns whether any failed (each reads its own files): none may
  // go on alone and wait in a collective the others never reach.
  std::exception_ptr failure;
  std::string problem;
  try {
    PreparedState state = Parts::prepared_state(*this);
    for (auto& [id, hook] : state_pre_hooks_.load->hooks()) hook(state.models, folder);
    Parts::check_counts(*this, folder, metadata);
    items = items_of(state, files, {}, /*by_groups=*/true);
    checkpoint::check_items(items, context);
  } catch (const std::exception& e) {
    failure = std::current_exception();
    problem = e.what();
  }
  if (num_processes() > 1) checkpoint::agree(*comm_, problem, "load_state from " + folder);
  if (failure) std::rethrow_exception(failure);
  checkpoint::apply_items(items, context);
  whole.reset();  // each process's parts of what was loaded
  if (other_world && is_main_process()) {
    std::cerr << "accelerate: note: checkpoint " << folder << " was saved by "
              << metadata.world_size << " processes and is loaded on " << num_processes()
              << ": ZeRO optimizer state resharded, loader positions rescaled"
              << (num_processes() > metadata.world_size ? ", new processes keep their random state"
                                                        : "")
              << "\n";
  }
  step_ = metadata.step;
  gradient_state_->set_optimizer_steps(metadata.optimizer_steps);
}

std::vector<std::pair<std::string, at::Tensor>> Accelerator::get_state_dict(
    const torch::nn::Module& model) {
  const ScopeGuard full_weights = engine_->full_weights();
  const ScopeGuard whole = whole_weights_of(model, prepared_modules_, tensor_parallel_);
  auto state = module_state_dict(model);
  const auto sixteen_bit = engine_->saved_weights_dtype();
  for (auto& entry : state) {
    at::Tensor& tensor = entry.second;
    tensor = sixteen_bit && tensor.is_floating_point() ? tensor.detach().to(*sixteen_bit)
                                                       : tensor.detach().clone();
  }
  return state;
}

std::vector<std::string> Accelerator::save_model(const torch::nn::Module& model,
                                                 const std::string& save_directory,
                                                 const SaveModelOptions& options) {
  wait_for_everyone();  // every process has finished training the weights
  const ScopeGuard exact_weights = engine_->exact_weights();  // the fp32 masters
  std::vector<std::string> files;
  std::string error;
  // Split weights: gathered whole on every process (each ZeRO-3 unit, then
  // each tensor-parallel part), and written by the main process.
  std::optional<ScopeGuard> full_weights, whole;
  if (tensor_parallel_.enabled()) {
    full_weights.emplace(engine_->full_weights());
    whole.emplace(whole_weights_of(model, prepared_modules_, tensor_parallel_));
  }
  auto groups = whole ? nullptr : engine_->weight_groups(model);
  if (groups) {
    // Sharded weights (ZeRO-3): written group by group; no process holds the whole model.
    files =
        checkpoint::save_model_by_groups(model, save_directory, options, *groups, is_main_process(),
                                         &error, engine_->saved_weights_dtype());
  } else if (is_main_process()) {
    try {
      files = accelerate::save_model(model, save_directory, options);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Doubles as the second wait: the files exist once anyone returns.
  const auto errors = comm_->all_gather_bytes(error);
  if (!errors.front().empty()) {
    if (is_main_process()) throw Error(errors.front());
    throw Error("save_model failed on the main process: " + errors.front());
  }
  return files;
}

}  // namespace accelerate
