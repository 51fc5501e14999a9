// load_model (see include/accelerate/checkpoint/model_saving.h): weights by name from a
// safetensors file, a pickled state dict, or an index and its shards.
// Everything is checked before the first tensor is written.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_header.h"
#include "checkpoint/safetensors_io.h"
#include "checkpoint/safetensors_model_files.h"
#include "checkpoint/safetensors_sharding.h"

namespace accelerate {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One weight file: a safetensors reader, or a pickled dict read into memory.
struct Source {
  std::string path;
  std::optional<SafetensorsReader> reader;
  std::map<std::string, at::Tensor> pickled;

  static Source open(const std::string& path) {
    Source source;
    source.path = path;
    if (ends_with(path, ".bin")) {
      source.read_pickle();
    } else {
      source.reader.emplace(path);
    }
    return source;
  }

  void read_pickle() {
    const auto file = safetensors::File::open_read(path);
    std::vector<char> bytes(file.size());
    file.read_at(bytes.data(), bytes.size(), 0);
    c10::IValue value;
    try {
      value = torch::jit::pickle_load(bytes);
    } catch (const std::exception& e) {
      throw Error("cannot read '" + path +
                  "' as a pickled state dict: " + safetensors::printable(e.what()));
    }
    if (!value.isGenericDict()) throw Error("'" + path + "' does not hold a dict of tensors");
    for (const auto& item : value.toGenericDict()) {
      if (!item.key().isString() || !item.value().isTensor()) {
        throw Error("'" + path + "' holds an entry that is not a name and a tensor");
      }
      pickled.emplace(item.key().toStringRef(), item.value().toTensor());
    }
  }

  std::vector<std::string> names() const {
    if (reader) return reader->names();
    std::vector<std::string> out;
    for (const auto& item : pickled) out.push_back(item.first);
    return out;
  }
  bool contains(const std::string& name) const {
    return reader ? reader->contains(name) : pickled.count(name) > 0;
  }
  std::string mismatch(const std::string& name, const at::Tensor& destination) const {
    if (reader) return reader->mismatch(name, destination);
    const at::Tensor& stored = pickled.at(name);
    if (stored.scalar_type() == destination.scalar_type() && stored.sizes() == destination.sizes())
      return "";
    return "'" + path + "': tensor '" + name + "' is " +
           std::string(c10::toString(stored.scalar_type())) + " " + c10::str(stored.sizes()) +
           " in the file but the destination is " + c10::toString(destination.scalar_type()) + " " +
           c10::str(destination.sizes());
  }
  void read_into(const std::string& name, const at::Tensor& destination) const {
    if (reader) return reader->read_into(name, destination);
    at::NoGradGuard no_grad;
    destination.copy_(pickled.at(name));
  }
};

// The weight files `path` stands for, each with the names to take from it.
std::vector<std::pair<Source, std::vector<std::string>>> open_sources(const std::string& path) {
  std::string file = path;
  if (fs::is_directory(path)) {
    file.clear();
    for (const auto& candidate :
         {model_files::kSafetensors.file(), model_files::kSafetensors.index(),
          model_files::kPickle.file(), model_files::kPickle.index()}) {
      if (fs::exists(fs::path(path) / candidate)) {
        file = (fs::path(path) / candidate).string();
        break;
      }
    }
    if (file.empty()) {
      throw Error(
          "load_model: no model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
          "pytorch_model.bin.index.json in '" +
          path + "'");
    }
  }
  std::vector<std::pair<Source, std::vector<std::string>>> sources;
  if (!ends_with(file, ".json")) {
    Source source = Source::open(file);
    auto names = source.names();
    sources.emplace_back(std::move(source), std::move(names));
    return sources;
  }
  const safetensors::ShardIndex index = safetensors::read_index(file);
  const fs::path directory = fs::path(file).parent_path();
  for (const auto& shard : index.files) {
    Source source = Source::open((directory / shard).string());
    std::vector<std::string> names;
    for (const auto& [name, mapped] : index.weight_map) {
      if (mapped != shard) continue;
      if (!source.contains(name)) {
        throw Error("index file '" + file + "' puts tensor '" + safetensors::printable(name) +
                    "' in '" + shard + "', which does not hold it");
      }
      names.push_back(name);
    }
    sources.emplace_back(std::move(source), std::move(names));
  }
  return sources;
}

std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 20;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShown; ++i)
    out += (i ? ", " : "") + safetensors::printable(names[i]);
  if (names.size() > kShown) out += " and " + std::to_string(names.size() - kShown) + " more";
  return out;
}

}  // namespace

LoadModelResult load_model(torch::nn::Module& module, const std::string& path, bool strict) {
  const auto sources = open_sources(path);
  const NamedTensors state = module_state_dict(module);
  std::map<std::string, at::Tensor> wanted(state.begin(), state.end());

  // Which file provides each name the module has; the rest is unexpected.
  LoadModelResult result;
  std::vector<std::pair<const Source*, std::string>> plan;
  std::set<const at::TensorImpl*> filled;
  for (const auto& [source, names] : sources) {
    for (const auto& name : names) {
      const auto found = wanted.find(name);
      if (found == wanted.end()) {
        result.unexpected_keys.push_back(name);
        continue;
      }
      plan.emplace_back(&source, name);
      filled.insert(found->second.unsafeGetTensorImpl());
    }
  }
  // A tied weight saved under its first name fills its other names too.
  for (const auto& [name, tensor] : state) {
    if (!filled.count(tensor.unsafeGetTensorImpl())) result.missing_keys.push_back(name);
  }
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    std::string message = "load_model from '" + path + "': names differ:";
    if (!result.missing_keys.empty())
      message += " missing keys: " + name_list(result.missing_keys) + ";";
    if (!result.unexpected_keys.empty())
      message += " unexpected keys: " + name_list(result.unexpected_keys) + ";";
    message.pop_back();
    throw Error(message + " (pass strict=false to load the rest)");
  }
  for (const auto& [source, name] : plan) {
    const std::string problem = source->mismatch(name, wanted.at(name));
    if (!problem.empty()) throw Error("load_model: " + problem);
  }
  for (const auto& [source, name] : plan) source->read_into(name, wanted.at(name));
  return result;
}

}  // namespace accelerate
