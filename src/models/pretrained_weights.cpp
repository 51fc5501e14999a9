// load_pretrained_weights / save_pretrained_weights
// (include/accelerate/models/pretrained.h). Unlike accelerate::load_model,
// which refuses a dtype difference (a checkpoint restores exactly what was
// saved), a pretrained folder is converted to the module's dtype: published
// Llama weights are bf16 and fine-tuning often runs in fp32.
#include "accelerate/models/pretrained.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "accelerate/memory/empty_weights.h"
#include "checkpoint/safetensors_sharding.h"
#include "models/config_json.h"
#include "models/pretrained_build.h"

namespace accelerate::models {
namespace {

namespace fs = std::filesystem;

std::string shape_text(c10::IntArrayRef shape) { return c10::str(shape); }

struct WeightFile {
  std::unique_ptr<SafetensorsReader> reader;
  std::vector<std::string> names;  // the names to take from it
};

// The files of `folder` with the names each contributes.
std::vector<WeightFile> open_weight_files(const std::string& folder) {
  const fs::path dir(folder);
  std::vector<WeightFile> files;
  if (fs::exists(dir / "model.safetensors")) {
    WeightFile file;
    file.reader = std::make_unique<SafetensorsReader>((dir / "model.safetensors").string());
    file.names = file.reader->names();
    files.push_back(std::move(file));
    return files;
  }
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (!fs::exists(index_path)) {
    throw Error(
        "load_pretrained_weights: no model.safetensors or model.safetensors.index.json in '" +
        folder + "'");
  }
  const safetensors::ShardIndex index = safetensors::read_index(index_path.string());
  for (const auto& shard : index.files) {
    WeightFile file;
    file.reader = std::make_unique<SafetensorsReader>((dir / shard).string());
    for (const auto& [name, mapped] : index.weight_map) {
      if (mapped != shard) continue;
      if (!file.reader->contains(name)) {
        throw Error("load_pretrained_weights: '" + index_path.string() + "' puts tensor '" + name +
                    "' in '" + shard + "', which does not hold it");
      }
      file.names.push_back(name);
    }
    files.push_back(std::move(file));
  }
  return files;
}

bool starts_with(const std::string& text, const std::string& head) {
  return text.compare(0, head.size(), head) == 0;
}

// How the files' names map onto the module's (base_model_prefix).
enum class PrefixChange { kNone, kAdd, kStrip };

PrefixChange prefix_change(const std::map<std::string, at::Tensor>& module_names,
                           const std::vector<WeightFile>& files, const std::string& prefix) {
  if (prefix.empty()) return PrefixChange::kNone;
  const std::string dotted = prefix + ".";
  bool module_has = false, files_have = false;
  for (const auto& [name, tensor] : module_names) module_has |= starts_with(name, dotted);
  for (const auto& file : files) {
    for (const auto& name : file.names) files_have |= starts_with(name, dotted);
  }
  if (module_has && !files_have) return PrefixChange::kAdd;
  if (!module_has && files_have) return PrefixChange::kStrip;
  return PrefixChange::kNone;
}

// A checked load: which file tensor goes to which of the module's names
// (by name, so it serves any module built the same way), with the files
// kept open for the reads.
struct LoadPlan {
  struct Step {
    const SafetensorsReader* reader;
    std::string stored, target;  // the name in the file, the name in the module
  };
  std::vector<WeightFile> files;
  std::vector<Step> steps;
  PretrainedLoadReport report;
};

// Every check of load_pretrained_weights, before anything is written (a
// refused load leaves the module as it was). Throws accelerate::Error.
LoadPlan plan_load(const torch::nn::Module& module, const std::string& folder,
                   const PretrainedLoadOptions& options) {
  LoadPlan load;
  load.files = open_weight_files(folder);
  const auto& files = load.files;
  const NamedTensors state = module_state_dict(module);
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  const std::string dotted = options.base_model_prefix() + ".";
  const PrefixChange change = prefix_change(by_name, files, options.base_model_prefix());
  PretrainedLoadReport& report = load.report;
  std::vector<std::string> problems;
  std::set<const at::TensorImpl*> filled, present;
  for (const auto& file : files) {
    for (const auto& name : file.names) {
      std::string target = name;
      if (change == PrefixChange::kAdd) target = dotted + name;
      if (change == PrefixChange::kStrip) {
        if (!starts_with(name, dotted)) {  // a head the base model has no place for
          report.skipped.push_back(name);
          continue;
        }
        target = name.substr(dotted.size());
      }
      const auto found = by_name.find(target);
      if (found == by_name.end()) {
        bool ignored = false;
        for (const auto& part : options.ignore_unexpected()) {
          ignored |= name.find(part) != std::string::npos;
        }
        if (ignored) {
          report.skipped.push_back(name);
          continue;
        }
        problems.push_back("unexpected tensor '" + name + "' in '" + file.reader->path() +
                           "': the model has no such parameter");
        continue;
      }
      const at::Tensor& destination = found->second;
      present.insert(destination.unsafeGetTensorImpl());
      const auto shape = file.reader->shape(name);
      if (c10::IntArrayRef(shape) != destination.sizes()) {
        problems.push_back("tensor '" + name + "' in '" + file.reader->path() + "' has shape " +
                           shape_text(shape) + " but the model's is " +
                           shape_text(destination.sizes()));
        continue;
      }
      const at::ScalarType stored = file.reader->dtype(name);
      if (stored != destination.scalar_type() &&
          !(at::isFloatingType(stored) && at::isFloatingType(destination.scalar_type()))) {
        problems.push_back("tensor '" + name + "' in '" + file.reader->path() + "' is " +
                           c10::toString(stored) + ", which does not convert to the model's " +
                           c10::toString(destination.scalar_type()));
        continue;
      }
      // A tied weight needs only one of its names in the files.
      if (filled.insert(destination.unsafeGetTensorImpl()).second) {
        load.steps.push_back({file.reader.get(), name, target});
      }
    }
  }
  for (const auto& [name, tensor] : state) {
    if (present.insert(tensor.unsafeGetTensorImpl()).second) {  // tied names: one miss
      bool allowed = false;
      for (const auto& head : options.allow_missing()) allowed |= starts_with(name, head);
      if (allowed) {
        report.kept_initial.push_back(name);
        continue;
      }
      problems.push_back("missing tensor '" + name + "': no weight file in '" + folder +
                         "' holds it");
    }
  }
  if (!problems.empty()) {
    std::string message = "load_pretrained_weights: " + problems.front();
    if (problems.size() > 1) {
      message += " (and " + std::to_string(problems.size() - 1) + " more problem" +
                 (problems.size() > 2 ? "s" : "") + ")";
    }
    throw Error(message);
  }
  return load;
}

// Reads every planned tensor into `module` (converted to its dtype).
void fill(torch::nn::Module& module, const LoadPlan& load) {
  const NamedTensors state = module_state_dict(module);
  const std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  at::NoGradGuard no_grad;
  for (const auto& step : load.steps) {
    const at::Tensor& destination = by_name.at(step.target);
    if (step.reader->dtype(step.stored) == destination.scalar_type()) {
      step.reader->read_into(step.stored, destination);
    } else {
      destination.copy_(step.reader->read(step.stored));
    }
  }
}

}  // namespace

PretrainedLoadReport load_pretrained_weights(torch::nn::Module& module, const std::string& folder,
                                             const PretrainedLoadOptions& options) {
  LoadPlan load = plan_load(module, folder, options);
  // Built inside Accelerator::zero3_init() on a process that receives its
  // shards from the main one: the parameters have no memory to fill, and
  // reading into them would make them resident (a whole copy per process).
  if (!building_empty_weights()) fill(module, load);
  return load.report;
}

std::shared_ptr<torch::nn::Module> build_pretrained_module(
    const std::function<std::shared_ptr<torch::nn::Module>()>& build, const std::string& folder,
    c10::ScalarType dtype, const PretrainedLoadOptions& rules) {
  const auto build_in_dtype = [&] {
    std::shared_ptr<torch::nn::Module> model = build();
    if (dtype != at::kFloat) model->to(dtype);
    return model;
  };
  // Inside zero3_init on a process that builds empty, the guard is active
  // already and the model stays empty; elsewhere it skips the initialisers.
  const bool already_empty = building_empty_weights();
  std::shared_ptr<torch::nn::Module> model;
  LoadPlan load;
  {
    const EmptyWeightsGuard skip_initialisation(!already_empty);
    model = build_in_dtype();
    load = plan_load(*model, folder, rules);  // every check; the files stay open
  }
  if (already_empty) return model;
  // Tensors no file holds need their initial values: the ordinary build.
  if (!load.report.kept_initial.empty()) model = build_in_dtype();
  fill(*model, load);
  return model;
}

std::string saved_weights_dtype(const std::string& folder) {
  for (const auto& file : open_weight_files(folder)) {
    for (const auto& name : file.names) {
      const at::ScalarType dtype = file.reader->dtype(name);
      if (at::isFloatingType(dtype)) return torch_dtype_name(dtype);
    }
  }
  return "float32";
}

std::vector<std::string> save_pretrained_weights(const torch::nn::Module& module,
                                                 const std::string& folder,
                                                 const ShardSize& max_shard_size) {
  return save_model(module, folder, SaveModelOptions().max_shard_size(max_shard_size));
}

}  // namespace accelerate::models
