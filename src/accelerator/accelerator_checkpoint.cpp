// Accelerator: save_state / load_state / save_model (checkpoint area).
// The folder mechanics (staging, rename, pruning) are in checkpointing.h;
// here is what goes into a checkpoint and in which file
// (docs/checkpoint-format.md).
#include <torch/serialize/archive.h>

#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>

#include "accelerate/accelerator.h"
#include "accelerate/errors.h"
#include "accelerate/grad_scaler.h"
#include "checkpoint/checkpoint_items.h"
#include "checkpoint/model_streaming.h"
#include "accelerator/accelerator_zero.h"
#include "checkpoint/optimizer_state.h"
#include "sharding/model_state_files.h"

namespace accelerate {
namespace fs = std::filesystem;

namespace {

// "model.safetensors", "model_1.safetensors", ... as Accelerate names them.
std::string indexed(const std::string& stem, size_t index, const std::string& extension) {
  return index == 0 ? stem + extension : stem + "_" + std::to_string(index) + extension;
}

std::string file_in(const std::string& folder, const std::string& name) {
  return (fs::path(folder) / name).string();
}

std::string loader_key(size_t index, const char* field) {
  return "dataloader_" + std::to_string(index) + "_" + field;
}

void require_count(const std::string& folder, const char* what, int64_t saved, size_t prepared) {
  if (saved == static_cast<int64_t>(prepared)) return;
  throw Error("checkpoint " + folder + " holds " + std::to_string(saved) + " " + what +
              " but this Accelerator has " + std::to_string(prepared) +
              " (prepare and register the same objects, in the same order, as the run that "
              "saved it)");
}

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

}  // namespace

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

std::string Accelerator::save_state(const std::optional<std::string>& output_dir) {
  std::string target;
  bool numbered = false;
  if (output_dir) {
    target = *output_dir;
  } else if (project_config_.automatic_checkpoint_naming()) {
    if (!project_config_.project_dir()) {
      throw ConfigError("project_config.automatic_checkpoint_naming needs a project_dir");
    }
    target = file_in(file_in(*project_config_.project_dir(), "checkpoints"),
                     checkpoint_folder_name(project_config_.iteration()));
    numbered = true;
  } else {
    throw ConfigError(
        "save_state() needs a folder, or project_config.automatic_checkpoint_naming with a "
        "project_dir");
  }

  StagedCheckpoint staged(*comm_, target, options_.checkpoint_options(),
                          /*allow_replace=*/!numbered);
  // ZeRO-3: each model file is written unit by unit, so that no process
  // holds a whole model, unless a pre-hook may replace the weights.
  const bool by_units = zero_ && state_pre_hooks_.save->hooks().empty();
  std::optional<ScopeGuard> full_weights;
  if (zero_ && !by_units) full_weights.emplace(zero_->full_weights());
  const std::string& dir = staged.staging_dir();
  std::vector<torch::nn::Module*> models = prepared_modules_;
  const auto is_sharded = [&](size_t i) {
    return zero_ && zero_->sharding(prepared_optimizers_[i]) != nullptr;
  };
  // optimizer[_i]<suffix>.bin and its tensor file.
  const auto save_optimizer = [&](size_t i, const std::string& folder, const std::string& suffix) {
    const std::string stem = file_in(folder, indexed("optimizer", i, "") + suffix);
    checkpoint::save_optimizer_state(*prepared_optimizers_[i], stem + ".bin", stem + ".safetensors",
                                     [&](const std::string& path) {
                                       if (options_.checkpoint_options().sync_to_disk()) {
                                         checkpoint::start_writeback(path);
                                       }
                                     });
  };
  std::vector<NamedTensors> weights;
  std::vector<int64_t> sharded_models;  // saved as each process's pieces
  std::string error;
  try {
    for (auto* model : models) weights.push_back(module_state_dict(*model));
    for (auto& [id, hook] : state_pre_hooks_.save->hooks()) hook(models, weights, dir);
    if (models.size() != weights.size()) {
      throw Error("a save_state pre-hook left " + std::to_string(models.size()) + " models but " +
                  std::to_string(weights.size()) + " weights");
    }
    // Files are written one after the other; each one's write-back starts
    // as soon as it is complete (see start_writeback).
    const bool sync = options_.checkpoint_options().sync_to_disk();
    auto write = [&](const std::string& name,
                     const std::function<void(torch::serialize::OutputArchive&)>& fill) {
      const std::string path = file_in(dir, name);
      checkpoint::save_archive(path, fill);
      if (sync) checkpoint::start_writeback(path);
    };
    // Every process takes part in each sharded model's gathers, even after
    // the main process failed to write one.
    std::string model_error;
    for (size_t i = 0; i < weights.size(); ++i) {
      std::string path = file_in(dir, indexed("model", i, ".safetensors"));
      auto* units = by_units ? zero_->units_for(*models[i]) : nullptr;
      auto* shards = zero_ && zero_->sharded_state_dict ? zero_->shards_for(*models[i]) : nullptr;
      if (shards != nullptr) {
        // Each process its pieces, read from its shards (no collective).
        sharded_models.push_back(static_cast<int64_t>(i));
        const std::string stem = file_in(dir, indexed("model", i, ""));
        path = stem + "_rank" + std::to_string(process_index()) + ".safetensors";
        try {
          sharding::save_model_pieces(*models[i], *shards, process_index(), num_processes(), path,
                                      is_main_process() ? stem + "_shards.json" : "");
        } catch (const std::exception& e) {
          if (model_error.empty()) model_error = e.what();
        }
        if (model_error.empty() && sync) checkpoint::start_writeback(path);
        continue;
      }
      if (units != nullptr) {
        std::vector<checkpoint::FileContents> files;
        if (is_main_process()) files.push_back({path, weights[i], {{"format", "pt"}}});
        const std::string failure =
            checkpoint::write_by_groups(files, *units->weight_groups(), is_main_process());
        if (model_error.empty()) model_error = failure;
      } else if (is_main_process() && model_error.empty()) {
        try {
          save_safetensors(path, weights[i], {{"format", "pt"}});
        } catch (const std::exception& e) {
          model_error = e.what();
        }
      }
      if (is_main_process() && model_error.empty() && sync) checkpoint::start_writeback(path);
    }
    if (!model_error.empty()) throw Error(model_error);
    if (is_main_process()) {
      for (size_t i = 0; i < prepared_optimizers_.size(); ++i) {
        if (!is_sharded(i)) {
          save_optimizer(i, dir, "");
          continue;
        }
        // How the per-process files cut the optimizer's parameters.
        const std::string manifest =
            zero_->sharding(prepared_optimizers_[i])->layout().manifest(num_processes());
        checkpoint::write_text_file(file_in(dir, indexed("optimizer", i, "") + "_partition.json"),
                                    manifest);
      }
      for (size_t i = 0; i < prepared_schedulers_.size(); ++i) {
        auto* scheduler = prepared_schedulers_[i];
        write(indexed("scheduler", i, ".bin"), [&](auto& archive) { scheduler->save(archive); });
      }
      if (scaler_) write("scaler.pt", [&](auto& archive) { scaler_->save(archive); });
      for (size_t i = 0; i < custom_objects_.size(); ++i) {
        write("custom_checkpoint_" + std::to_string(i) + ".bin", custom_objects_[i].save);
      }
    }
    // Every process: the state of its shard of each ZeRO optimizer, its
    // generators and its loaders' positions.
    for (size_t i = 0; i < prepared_optimizers_.size(); ++i) {
      if (is_sharded(i)) save_optimizer(i, dir, "_rank" + std::to_string(process_index()));
    }
    write("random_states_" + std::to_string(process_index()) + ".bin",
          [&](torch::serialize::OutputArchive& archive) {
            checkpoint::save_rng_states(archive);
            for (size_t i = 0; i < loaders_.size(); ++i) {
              const DataLoaderPosition position = loaders_[i]->position();
              checkpoint::write_int(archive, loader_key(i, "epoch"), position.epoch);
              checkpoint::write_int(archive, loader_key(i, "batches_yielded"),
                                    static_cast<int64_t>(position.batches_yielded));
              checkpoint::write_int(archive, loader_key(i, "shuffle_seed"),
                                    static_cast<int64_t>(position.shuffle_seed));
            }
          });
  } catch (const std::exception& e) {
    error = e.what();
  }

  CheckpointMetadata metadata;
  metadata.world_size = num_processes();
  metadata.models = static_cast<int64_t>(weights.size());
  metadata.optimizers = static_cast<int64_t>(prepared_optimizers_.size());
  metadata.schedulers = static_cast<int64_t>(prepared_schedulers_.size());
  metadata.dataloaders = static_cast<int64_t>(loaders_.size());
  metadata.custom_objects = static_cast<int64_t>(custom_objects_.size());
  metadata.scaler = scaler_ != nullptr;
  metadata.step = step_;
  metadata.optimizer_steps = gradient_state_->optimizer_steps();
  for (size_t i = 0; i < prepared_optimizers_.size(); ++i) {
    if (is_sharded(i)) metadata.sharded_optimizers.push_back(static_cast<int64_t>(i));
  }
  metadata.sharded_models = sharded_models;
  staged.commit(metadata, error);

  if (numbered) {
    project_config_.iteration(project_config_.iteration() + 1);
    if (project_config_.total_limit() && is_main_process()) {
      // After commit's final collective: no process is still writing.
      const std::string checkpoints = fs::path(staged.final_dir()).parent_path().string();
      try {
        prune_checkpoints(checkpoints, *project_config_.total_limit());
      } catch (const std::exception& e) {
        // The new checkpoint is safe; only the cleanup failed.
        std::cerr << "accelerate: warning: could not delete old checkpoints: " << e.what() << "\n";
      }
      if (const auto& observer = options_.checkpoint_options().stage_observer()) {
        observer(CheckpointStage::kPruned, checkpoints);
      }
    }
  }
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
    const std::string checkpoints = file_in(*project_config_.project_dir(), "checkpoints");
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
  const int saved_world = metadata.world_size;
  const bool other_world = saved_world != num_processes();
  if (other_world && metadata.sharded_optimizers.empty()) {
    throw Error("checkpoint " + folder + " was saved by " + std::to_string(saved_world) +
                " processes but this job has " + std::to_string(num_processes()) +
                " (random states and loader positions are per process)");
  }
  std::vector<torch::nn::Module*> models = prepared_modules_;
  // On another number of processes: a process the checkpoint had keeps
  // restoring its own; a new one reads the last's loader positions only.
  const int random_source = std::min(process_index(), saved_world - 1);
  const std::string random_states =
      file_in(folder, "random_states_" + std::to_string(random_source) + ".bin");
  const auto is_sharded = [&](size_t i) {
    return zero_ && zero_->sharding(prepared_optimizers_[i]) != nullptr;
  };
  std::vector<checkpoint::PendingOptimizerState> optimizers;
  // Models loaded by element ranges (ZeRO-3, or saved as pieces).
  std::vector<std::optional<sharding::ModelStateFiles>> model_files(models.size());
  std::vector<size_t> resharded;  // saved per process, loaded through the bucket layout
  // Everything is read and checked before anything changes, and every
  // process learns whether any failed (each reads its own files): none may
  // go on alone and wait in a collective the others never reach.
  std::exception_ptr failure;
  std::string problem;
  try {
    for (auto& [id, hook] : state_pre_hooks_.load->hooks()) hook(models, folder);
    require_count(folder, "models", metadata.models, models.size());
    require_count(folder, "optimizers", metadata.optimizers, prepared_optimizers_.size());
    require_count(folder, "schedulers", metadata.schedulers, prepared_schedulers_.size());
    require_count(folder, "data loaders", metadata.dataloaders, loaders_.size());
    require_count(folder, "registered objects", metadata.custom_objects, custom_objects_.size());
    if (metadata.scaler != (scaler_ != nullptr)) {
      throw Error("checkpoint " + folder + (metadata.scaler ? " has" : " has no") +
                  " scaler.pt but this Accelerator " + (scaler_ ? "uses" : "does not use") +
                  " fp16 loss scaling");
    }
    for (auto* loader : loaders_) {
      if (loader->is_iterating()) throw Error("load_state: a prepared data loader is mid-iteration");
    }
    // Every file present, and every model's tensors there with the right
    // shapes, before anything changes.
    std::vector<std::string> files = {random_states};
    for (size_t i = 0; i < prepared_schedulers_.size(); ++i) {
      files.push_back(file_in(folder, indexed("scheduler", i, ".bin")));
    }
    for (size_t i = 0; i < custom_objects_.size(); ++i) {
      files.push_back(file_in(folder, "custom_checkpoint_" + std::to_string(i) + ".bin"));
    }
    if (scaler_) files.push_back(file_in(folder, "scaler.pt"));
    for (const auto& path : files) {
      if (!fs::is_regular_file(path)) throw Error("checkpoint file " + path + " is missing");
    }
    for (size_t i = 0; i < models.size(); ++i) {
      const std::string path = file_in(folder, indexed("model", i, ".safetensors"));
      const bool saved_in_pieces =
          std::count(metadata.sharded_models.begin(), metadata.sharded_models.end(),
                     static_cast<int64_t>(i)) > 0;
      // ZeRO-3 loads each process's elements only; pieces load anywhere.
      if (saved_in_pieces || (zero_ && zero_->shards_for(*models[i]))) {
        const std::string stem = file_in(folder, indexed("model", i, ""));
        model_files[i] =
            saved_in_pieces
                ? sharding::ModelStateFiles::from_index(
                      stem + "_shards.json",
                      [&](int k) { return stem + "_rank" + std::to_string(k) + ".safetensors"; })
                : sharding::ModelStateFiles::from_file(path);
        model_files[i]->check(*models[i]);
        continue;
      }
      if (!fs::is_regular_file(path)) throw Error("checkpoint file " + path + " is missing");
      SafetensorsReader reader(path);
      for (const auto& [name, tensor] : module_state_dict(*models[i])) {
        if (!reader.contains(name)) throw Error(path + ": tensor '" + name + "' is missing");
        const std::string mismatch = reader.mismatch(name, tensor);
        if (!mismatch.empty()) throw Error(mismatch);
      }
    }
    // Optimizers: read and checked (their tensor files too) before any is applied.
    for (size_t i = 0; i < prepared_optimizers_.size(); ++i) {
      const bool saved_sharded =
          std::count(metadata.sharded_optimizers.begin(), metadata.sharded_optimizers.end(),
                     static_cast<int64_t>(i)) > 0;
      if (!saved_sharded && is_sharded(i)) {
        throw Error("checkpoint " + folder + " holds the whole state of optimizer " +
                    std::to_string(i) +
                    " but this Accelerator shards it (ZeRO stage 1 or 2); resume without ZeRO, "
                    "or from a checkpoint saved with it");
      }
      if (saved_sharded && (other_world || !is_sharded(i))) {
        resharded.push_back(i);
        continue;
      }
      const std::string manifest = file_in(folder, indexed("optimizer", i, "") + "_partition.json");
      if (is_sharded(i)) zero_->sharding(prepared_optimizers_[i])->layout().check_manifest(manifest);
      const std::string rank = is_sharded(i) ? "_rank" + std::to_string(process_index()) : "";
      optimizers.emplace_back(*prepared_optimizers_[i],
                              file_in(folder, indexed("optimizer", i, "") + rank + ".bin"));
    }
  } catch (const std::exception& e) {
    failure = std::current_exception();
    problem = e.what();
  }
  if (num_processes() > 1) checkpoint::agree(*comm_, problem, "load_state from " + folder);
  if (failure) std::rethrow_exception(failure);
  // Each reads and checks every saved shard before it changes anything.
  for (size_t i : resharded) {
    const auto archive_of = [&](int k) {
      return file_in(folder, indexed("optimizer", i, "") + "_rank" + std::to_string(k) + ".bin");
    };
    const std::string manifest = file_in(folder, indexed("optimizer", i, "") + "_partition.json");
    if (auto* sharded = is_sharded(i) ? zero_->sharding(prepared_optimizers_[i]) : nullptr) {
      sharded->load_resharded(saved_world, manifest, archive_of);
    } else {
      sharding::load_sharded_state_whole(*prepared_optimizers_[i], prepared_modules_, saved_world,
                                         manifest, archive_of);
    }
  }
  if (other_world && is_main_process()) {
    std::cerr << "accelerate: note: checkpoint " << folder << " was saved by " << saved_world
              << " processes and is loaded on " << num_processes()
              << ": ZeRO optimizer state resharded, loader positions rescaled"
              << (num_processes() > saved_world ? ", new processes keep their random state" : "")
              << "\n";
  }

  for (size_t i = 0; i < models.size(); ++i) {
    if (!model_files[i]) {
      load_model(*models[i], file_in(folder, indexed("model", i, ".safetensors")), /*strict=*/true);
      continue;
    }
    auto* shards = zero_ ? zero_->shards_for(*models[i]) : nullptr;
    model_files[i]->load_into(*models[i], shards);
    if (shards != nullptr) shards->gather_parameters();  // the buffers that are whole
  }
  for (auto& optimizer : optimizers) optimizer.apply();
  for (size_t i = 0; i < prepared_schedulers_.size(); ++i) {
    auto* scheduler = prepared_schedulers_[i];
    checkpoint::load_archive(file_in(folder, indexed("scheduler", i, ".bin")),
                             [&](auto& archive) { scheduler->load(archive); });
  }
  if (scaler_) {
    checkpoint::load_archive(file_in(folder, "scaler.pt"),
                             [&](auto& archive) { scaler_->load(archive); });
  }
  for (size_t i = 0; i < custom_objects_.size(); ++i) {
    checkpoint::load_archive(file_in(folder, "custom_checkpoint_" + std::to_string(i) + ".bin"),
                             custom_objects_[i].load);
  }
  checkpoint::load_archive(random_states, [&](torch::serialize::InputArchive& archive) {
    if (random_source == process_index()) checkpoint::load_rng_states(archive);
    for (size_t i = 0; i < loaders_.size(); ++i) {
      DataLoaderPosition position;
      position.epoch = checkpoint::read_int(archive, loader_key(i, "epoch"));
      // The same samples consumed in all, in batches of the new world.
      position.batches_yielded =
          static_cast<uint64_t>(checkpoint::read_int(archive, loader_key(i, "batches_yielded"))) *
          static_cast<uint64_t>(saved_world) / static_cast<uint64_t>(num_processes());
      position.shuffle_seed =
          static_cast<uint64_t>(checkpoint::read_int(archive, loader_key(i, "shuffle_seed")));
      loaders_[i]->restore_position(position);
    }
  });
  step_ = metadata.step;
  gradient_state_->set_optimizer_steps(metadata.optimizer_steps);
}

std::vector<std::pair<std::string, at::Tensor>> Accelerator::get_state_dict(
    const torch::nn::Module& model) {
  std::optional<ScopeGuard> full_weights;
  if (zero_) full_weights.emplace(zero_->full_weights());
  auto state = module_state_dict(model);
  const auto sixteen_bit = zero_ ? zero_->sixteen_bit_dtype(mixed_precision_) : std::nullopt;
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
  std::vector<std::string> files;
  std::string error;
  if (auto* units = zero_ ? zero_->units_for(model) : nullptr) {
    // ZeRO-3: written unit by unit; no process holds the whole model.
    files = checkpoint::save_model_by_groups(model, save_directory, options, *units->weight_groups(),
                                             is_main_process(), &error,
                                             zero_->sixteen_bit_dtype(mixed_precision_));
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
