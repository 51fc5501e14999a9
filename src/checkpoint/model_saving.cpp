// save_model and the state-dict order (see include/accelerate/checkpoint/model_saving.h).
#include "accelerate/checkpoint/model_saving.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/nn/module.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "checkpoint/model_streaming.h"
#include "checkpoint/safetensors_io.h"
#include "checkpoint/safetensors_model_files.h"
#include "checkpoint/safetensors_sharding.h"
#include "checkpoint/safetensors_streaming.h"

namespace accelerate {
namespace {

namespace fs = std::filesystem;

void collect(const torch::nn::Module& module, const std::string& prefix, NamedTensors& out) {
  // Python's state_dict: own parameters, own buffers, then each child's.
  // Undefined tensors (LibTorch registers Linear(bias=false)'s bias that
  // way) are skipped, as Python skips None.
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    if (item.value().defined()) out.emplace_back(prefix + item.key(), item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/false)) {
    if (item.value().defined()) out.emplace_back(prefix + item.key(), item.value());
  }
  for (const auto& child : module.named_children())
    collect(*child.value(), prefix + child.key() + ".", out);
}

// Same memory, same view: a tied weight registered under a second name.
bool same_view(const at::Tensor& a, const at::Tensor& b) {
  return a.is_same(b) ||
         (a.has_storage() && b.has_storage() && a.storage().is_alias_of(b.storage()) &&
          a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() &&
          a.strides() == b.strides() && a.scalar_type() == b.scalar_type());
}

// Atomic write of a small text or byte file (index, pickled shard).
void write_whole_file(const std::string& path, const void* data, uint64_t size) {
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  try {
    safetensors::File file = safetensors::File::open_write(temporary);
    file.write_all(data, size);
    file.close();
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
      throw Error("cannot rename '" + temporary + "' to '" + path + "': " + std::strerror(errno));
    }
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
}

void write_pickle(const std::string& path, const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor copy = tensor.detach().to(at::kCPU).contiguous();
    // A view would pickle its whole storage; store just its own elements.
    if (copy.storage().nbytes() != static_cast<size_t>(copy.numel()) * copy.element_size()) {
      copy = copy.clone();
    }
    dict.insert(name, copy);
  }
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  write_whole_file(path, bytes.data(), bytes.size());
}

void write_weights(const std::string& path, const NamedTensors& tensors, bool safe) {
  if (safe) {
    save_safetensors(path, tensors, {{"format", "pt"}});
  } else {
    write_pickle(path, tensors);
  }
}

// Removes weight files an earlier save left that this save did not write.
void remove_stale(const fs::path& directory, const std::set<std::string>& written) {
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (written.count(name) || !entry.is_regular_file(error)) continue;
    for (const auto& format : {model_files::kSafetensors, model_files::kPickle}) {
      if (name == format.file() || name == format.index() ||
          safetensors::is_shard_file_name(name, format.stem, format.extension)) {
        fs::remove(entry.path(), error);
      }
    }
  }
}

}  // namespace

uint64_t ShardSize::bytes() const {
  if (negative_) throw ConfigError("max_shard_size must not be negative");
  return text_.empty() ? bytes_ : safetensors::parse_size(text_);
}

NamedTensors module_state_dict(const torch::nn::Module& module) {
  NamedTensors out;
  collect(module, "", out);
  return out;
}

namespace {

// save_model's files for `module` in `save_directory` (created): one, or
// shards and the index text.
struct ModelFiles {
  fs::path directory;
  std::vector<std::pair<std::string, NamedTensors>> files;  // file name, its tensors
  std::string index;                                        // when sharded
  std::string index_name;
};

ModelFiles plan_model_files(const torch::nn::Module& module, const std::string& save_directory,
                            const SaveModelOptions& options) {
  const uint64_t max_shard_size = options.max_shard_size().bytes();
  const auto& format =
      options.safe_serialization() ? model_files::kSafetensors : model_files::kPickle;

  NamedTensors tensors = checkpoint::unique_state_dict(module);
  std::vector<uint64_t> sizes;
  for (const auto& entry : tensors) {
    sizes.push_back(static_cast<uint64_t>(entry.second.numel()) * entry.second.element_size());
  }

  ModelFiles plan;
  plan.directory = fs::path(save_directory);
  std::error_code error;
  fs::create_directories(plan.directory, error);
  if (error || !fs::is_directory(plan.directory)) {
    throw Error("save_model: cannot create folder '" + save_directory +
                "': " + (error ? error.message() : "a file is in the way"));
  }

  const auto shards = safetensors::plan_shards(sizes, max_shard_size);
  if (shards.size() == 1) {
    plan.files.emplace_back(format.file(), std::move(tensors));
    return plan;
  }
  safetensors::ShardIndex index;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file =
        safetensors::shard_file_name(format.stem, s, shards.size(), format.extension);
    NamedTensors shard;
    for (size_t i : shards[s]) {
      shard.push_back(tensors[i]);
      index.weight_map[tensors[i].first] = file;
      index.total_size += sizes[i];
    }
    plan.files.emplace_back(file, std::move(shard));
  }
  plan.index = safetensors::index_json(index);
  plan.index_name = format.index();
  return plan;
}

// After the weight files: the index, and no stale file of an earlier save.
std::vector<std::string> finish(const ModelFiles& plan) {
  std::vector<std::string> written;
  for (const auto& file : plan.files) written.push_back(file.first);
  if (!plan.index.empty()) {
    write_whole_file((plan.directory / plan.index_name).string(), plan.index.data(),
                     plan.index.size());
    written.push_back(plan.index_name);
  }
  remove_stale(plan.directory, std::set<std::string>(written.begin(), written.end()));
  return written;
}

}  // namespace

std::vector<std::string> save_model(const torch::nn::Module& module,
                                    const std::string& save_directory,
                                    const SaveModelOptions& options) {
  const ModelFiles plan = plan_model_files(module, save_directory, options);
  for (const auto& [file, tensors] : plan.files) {
    write_weights((plan.directory / file).string(), tensors, options.safe_serialization());
  }
  return finish(plan);
}

namespace checkpoint {

NamedTensors unique_state_dict(const torch::nn::Module& module) {
  NamedTensors tensors;
  for (auto& [name, tensor] : module_state_dict(module)) {
    const bool tied = std::any_of(tensors.begin(), tensors.end(),
                                  [&](const auto& kept) { return same_view(kept.second, tensor); });
    if (!tied) tensors.emplace_back(name, tensor);
  }
  return tensors;
}

namespace {

// `tensor` as written: floating-point ones in `dtype` when there is one.
at::Tensor as_written(const at::Tensor& tensor, std::optional<at::ScalarType> dtype) {
  return dtype && tensor.is_floating_point() ? tensor.to(*dtype) : tensor;
}

}  // namespace

std::string write_by_groups(const std::vector<FileContents>& files, WeightGroups& groups,
                            bool write, std::optional<at::ScalarType> floating_dtype) {
  std::string error;
  std::vector<std::unique_ptr<safetensors::StreamedFile>> outputs;
  // Runs `step` while this process writes and nothing failed yet.
  const auto writing = [&](const std::function<void()>& step) {
    if (!write || !error.empty()) return;
    try {
      step();
    } catch (const std::exception& e) {
      error = e.what();
      outputs.clear();  // removes the partial files
    }
  };
  // Where each tensor goes: (file, name), by tensor identity.
  std::unordered_map<const c10::TensorImpl*, std::vector<std::pair<size_t, std::string>>> places;
  std::unordered_set<const c10::TensorImpl*> in_groups;
  writing([&] {
    for (const FileContents& file : files) {
      // The header's dtypes and shapes, from meta tensors when converted.
      NamedTensors declared;
      for (const auto& [name, tensor] : file.tensors) {
        const bool converted = floating_dtype && tensor.is_floating_point();
        declared.emplace_back(
            name, converted ? at::empty(tensor.sizes(),
                                        tensor.options().dtype(*floating_dtype).device(at::kMeta))
                            : tensor);
      }
      outputs.push_back(
          std::make_unique<safetensors::StreamedFile>(file.path, declared, file.metadata));
      for (const auto& [name, tensor] : file.tensors) {
        places[tensor.unsafeGetTensorImpl()].emplace_back(outputs.size() - 1, name);
      }
    }
    for (size_t g = 0; g < groups.count(); ++g) {
      for (const at::Tensor& tensor : groups.tensors(g))
        in_groups.insert(tensor.unsafeGetTensorImpl());
    }
  });
  const auto write_tensor = [&](const at::Tensor& tensor) {
    auto it = places.find(tensor.unsafeGetTensorImpl());
    if (it == places.end()) return;
    const at::Tensor written = as_written(tensor, floating_dtype);
    for (const auto& [file, name] : it->second) outputs[file]->write(name, written);
    places.erase(it);  // a tensor in two parts is written once
  };
  writing([&] {  // whole already: no part holds them
    for (const FileContents& file : files) {
      for (const auto& entry : file.tensors) {
        if (in_groups.count(entry.second.unsafeGetTensorImpl()) == 0) write_tensor(entry.second);
      }
    }
  });
  for (size_t g = 0; g < groups.count(); ++g) {
    groups.gather(g);
    writing([&] {
      for (const at::Tensor& tensor : groups.tensors(g)) write_tensor(tensor);
    });
    groups.release(g);
  }
  writing([&] {
    for (auto& output : outputs) output->commit();
  });
  return error;
}

std::vector<std::string> save_model_by_groups(const torch::nn::Module& module,
                                              const std::string& save_directory,
                                              const SaveModelOptions& options, WeightGroups& groups,
                                              bool write, std::string* error,
                                              std::optional<at::ScalarType> floating_dtype) {
  std::optional<ModelFiles> plan;
  if (write) {
    try {
      plan = plan_model_files(module, save_directory, options);
    } catch (const std::exception& e) {
      *error = e.what();
    }
  }
  if (!plan || options.safe_serialization()) {
    std::vector<FileContents> files;
    if (plan) {
      for (const auto& [file, tensors] : plan->files) {
        files.push_back({(plan->directory / file).string(), tensors, {{"format", "pt"}}});
      }
    }
    const std::string failure = write_by_groups(files, groups, plan.has_value(), floating_dtype);
    if (!plan) return {};
    if (!failure.empty()) {
      *error = failure;
      return {};
    }
  } else {
    // A pickled state dict is written in one piece: every part whole at once.
    for (size_t g = 0; g < groups.count(); ++g) groups.gather(g);
    try {
      for (const auto& [file, tensors] : plan->files) {
        NamedTensors written;
        for (const auto& [name, tensor] : tensors) {
          written.emplace_back(name, as_written(tensor, floating_dtype));
        }
        write_weights((plan->directory / file).string(), written, /*safe=*/false);
      }
    } catch (const std::exception& e) {
      *error = e.what();
    }
    for (size_t g = 0; g < groups.count(); ++g) groups.release(g);
    if (!error->empty()) return {};
  }
  try {
    return finish(*plan);
  } catch (const std::exception& e) {
    *error = e.what();
    return {};
  }
}

}  // namespace checkpoint
}  // namespace accelerate
