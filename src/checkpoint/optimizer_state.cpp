#include "checkpoint/optimizer_state.h"

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <filesystem>
#include <optional>
#include <typeinfo>

#include "accelerate/accelerator/optimizer.h"
#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "checkpoint/checkpoint_archives.h"
#include "checkpoint/optimizer_kinds.h"
#include "compat/optim_compat.h"
#include "distributed/failure_diagnosis.h"

namespace accelerate::checkpoint {
namespace {

namespace fs = std::filesystem;
using torch::optim::OptimizerParamState;
using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

// optimizer.bin of the split format: this key names the tensor file (its
// absence means a whole Optimizer::save archive, format version 1).
constexpr const char* kTensorFileKey = "tensor_file";

std::string tensor_name(int64_t index, const char* field) {
  return "state." + std::to_string(index) + "." + field;
}

std::string group_key(size_t group) { return "param_groups/" + std::to_string(group); }
std::string state_key(int64_t index) { return "state/" + std::to_string(index); }

// A parameter's state without its tensors, and the tensors' names.
struct SplitState {
  int64_t index;
  std::unique_ptr<OptimizerParamState> rest;
  c10::List<std::string> tensors;
};

}  // namespace

void save_optimizer_state(const torch::optim::Optimizer& optimizer, const std::string& archive_path,
                          const std::string& tensor_path,
                          const std::function<void(const std::string&)>& written) {
  const Kind* kind = kind_of(optimizer);
  NamedTensors tensors;
  std::vector<SplitState> states;
  int64_t index = 0;  // counted across param groups, in order
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      const OptimizerParamState* state = kind ? compat::param_state(optimizer, param) : nullptr;
      if (state && !kind->holds(*state)) kind = nullptr;  // not what save() would write
      if (state && kind) {
        SplitState split{index, state->clone(), c10::List<std::string>()};
        for (const auto& t : kind->tensors) {
          at::Tensor& tensor = t.slot(*split.rest);
          if (!tensor.defined()) continue;
          split.tensors.push_back(t.name);
          tensors.emplace_back(tensor_name(index, t.name), tensor);
          tensor = at::Tensor();  // serialize() skips undefined tensors
        }
        states.push_back(std::move(split));
      }
      ++index;
    }
  }
  if (!kind) {
    save_archive(archive_path, [&](OutputArchive& archive) { optimizer.save(archive); });
    written(archive_path);
    return;
  }

  save_safetensors(tensor_path, tensors, {{"format", "pt"}});
  written(tensor_path);
  save_archive(archive_path, [&](OutputArchive& archive) {
    archive.write(kTensorFileKey, c10::IValue(fs::path(tensor_path).filename().string()));
    archive.write("optimizer", c10::IValue(std::string(kind->name)));
    const auto& groups = optimizer.param_groups();
    write_int(archive, "param_groups/size", static_cast<int64_t>(groups.size()));
    for (size_t g = 0; g < groups.size(); ++g) {
      OutputArchive group(archive.compilation_unit());
      OutputArchive options(archive.compilation_unit());
      groups[g].options().serialize(options);
      write_int(group, "params/size", static_cast<int64_t>(groups[g].params().size()));
      group.write("options", options);
      archive.write(group_key(g), group);
    }
    for (const auto& state : states) {
      OutputArchive entry(archive.compilation_unit());
      OutputArchive fields(archive.compilation_unit());
      state.rest->serialize(fields);
      entry.write("fields", fields);
      entry.write("tensors", c10::IValue(state.tensors));
      archive.write(state_key(state.index), entry);
    }
  });
  written(archive_path);
}

struct PendingOptimizerState::Impl {
  // One parameter's state, complete but for its tensors.
  struct Entry {
    at::Tensor param;
    std::unique_ptr<OptimizerParamState> state;
    std::vector<std::pair<const StateTensor*, std::string>> tensors;  // slot, name in the file
  };

  torch::optim::Optimizer& optimizer;
  const Kind* kind;  // null: not a built-in optimizer
  std::string archive_path;
  InputArchive archive;
  // The split format (else `archive` is a whole Optimizer::save archive).
  std::unique_ptr<SafetensorsReader> reader;
  std::vector<InputArchive> options;  // per param group
  std::vector<Entry> entries;

  Impl(torch::optim::Optimizer& optimizer, std::string path)
      : optimizer(optimizer), kind(kind_of(optimizer)), archive_path(std::move(path)) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw Error("cannot load " + archive_path + ": " + problem);
  }

  void read_split(const std::string& tensor_file) {
    const auto saved = read_string(archive, "optimizer");
    if (!kind || saved != kind->name) {
      fail("it holds the state of a torch::optim::" + saved +
           ", which is not the type of the prepared optimizer");
    }
    if (tensor_file.empty() || tensor_file != fs::path(tensor_file).filename().string() ||
        tensor_file == "." || tensor_file == "..") {
      fail("'" + tensor_file + "' is not a file name");
    }
    const std::string tensor_path = (fs::path(archive_path).parent_path() / tensor_file).string();
    std::error_code ec;
    if (!fs::is_regular_file(tensor_path, ec)) {
      throw Error("checkpoint file " + tensor_path + " is missing (" + archive_path +
                  " keeps the optimizer's state tensors there)");
    }
    reader = std::make_unique<SafetensorsReader>(tensor_path);

    auto& groups = optimizer.param_groups();
    const int64_t group_count = read_count(archive, "param_groups/size");
    if (group_count != static_cast<int64_t>(groups.size())) {
      fail("it has " + std::to_string(group_count) + " param groups but the optimizer has " +
           std::to_string(groups.size()));
    }
    int64_t index = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      InputArchive group;
      archive.read(group_key(g), group);
      const int64_t size = read_count(group, "params/size");
      if (size != static_cast<int64_t>(groups[g].params().size())) {
        fail("param group " + std::to_string(g) + " has " + std::to_string(size) +
             " parameters but the optimizer's has " + std::to_string(groups[g].params().size()));
      }
      options.emplace_back();
      group.read("options", options.back());
      // Parsed once now so that a bad entry fails before anything changes.
      groups[g].options().clone()->serialize(options.back());
      for (const auto& param : groups[g].params()) read_entry(index++, param);
    }
  }

  void read_entry(int64_t index, const at::Tensor& param) {
    InputArchive entry;
    if (!archive.try_read(state_key(index), entry)) return;  // no state for this parameter
    Entry result{param, kind->make_state(), {}};
    InputArchive fields;
    entry.read("fields", fields);
    result.state->serialize(fields);
    c10::IValue names;
    if (!entry.try_read("tensors", names) || !names.isList()) {
      fail("entry '" + state_key(index) + "/tensors' is missing or not a list");
    }
    for (const auto& name : names.to<c10::List<std::string>>()) {
      const std::string field = name;
      const StateTensor* slot = find_tensor(*kind, field);
      if (!slot) fail("a " + std::string(kind->name) + " has no state tensor '" + field + "'");
      const std::string stored = tensor_name(index, slot->name);
      if (!reader->contains(stored)) {
        throw Error(reader->path() + ": tensor '" + stored + "' is missing");
      }
      reader->dtype(stored);  // throws for a dtype LibTorch lacks
      const auto wanted = state_tensor_shape(*slot, param.sizes());
      if (c10::IntArrayRef(reader->shape(stored)) != c10::IntArrayRef(wanted)) {
        throw Error(reader->path() + ": tensor '" + stored + "' has shape " +
                    c10::str(c10::IntArrayRef(reader->shape(stored))) + " but its parameter (" +
                    c10::str(param.sizes()) + ") needs " + c10::str(c10::IntArrayRef(wanted)));
      }
      result.tensors.emplace_back(slot, stored);
    }
    entries.push_back(std::move(result));
  }

  // checkpoint_archives' readers, with this file's name in the error.
  std::string read_string(InputArchive& from, const std::string& key) const {
    try {
      return checkpoint::read_string(from, key);
    } catch (const Error& error) {
      fail(error.what());
    }
  }

  int64_t read_count(InputArchive& from, const std::string& key) const {
    try {
      return read_int(from, key);
    } catch (const Error& error) {
      fail(error.what());
    }
  }

  void apply_split() {
    auto& groups = optimizer.param_groups();
    for (size_t g = 0; g < groups.size(); ++g) groups[g].options().serialize(options[g]);
    for (auto& entry : entries) {
      // The state it replaces: its tensors are reused where that cannot be
      // told apart from new ones (see reusable).
      auto old = compat::take_param_state(optimizer, entry.param);
      if (old && !kind->holds(*old)) old.reset();
      for (const auto& [slot, name] : entry.tensors) {
        at::Tensor tensor;
        if (reader->dtype(name) == entry.param.scalar_type()) {
          const auto shape = state_tensor_shape(*slot, entry.param.sizes());
          tensor = old ? reusable(std::move(slot->slot(*old)), entry.param, shape) : at::Tensor();
          if (!tensor.defined()) tensor = at::empty(shape, entry.param.options());
          reader->read_into(name, tensor);
        } else {
          tensor = reader->read(name).to(entry.param.options());
        }
        slot->slot(*entry.state) = std::move(tensor);
      }
      compat::set_param_state(optimizer, entry.param, std::move(entry.state));
    }
    entries.clear();
  }

  // `old` if nothing else references it (no other handle, view or weak
  // reference) and it has the layout a new state tensor for `param` would
  // have: overwriting it is then indistinguishable from a new tensor, and
  // saves allocating and faulting in the memory (a reload in a running
  // process). Else undefined.
  static at::Tensor reusable(at::Tensor old, const at::Tensor& param, c10::IntArrayRef shape) {
    if (!old.defined() || old.use_count() != 1 || old.weak_use_count() != 1 ||
        old.storage().use_count() != 1 || old.requires_grad() || !old.is_contiguous() ||
        old.sizes() != shape || old.scalar_type() != param.scalar_type() ||
        old.device() != param.device() || old.layout() != param.layout()) {
      return {};
    }
    return old;
  }
};

PendingOptimizerState::PendingOptimizerState(torch::optim::Optimizer& optimizer,
                                             const std::string& archive_path)
    : impl_(std::make_unique<Impl>(optimizer, archive_path)) {
  std::optional<std::string> tensor_file;
  load_archive(archive_path, [&](InputArchive& archive) {
    c10::IValue marker;
    if (archive.try_read(kTensorFileKey, marker)) {
      if (!marker.isString())
        throw Error("entry '" + std::string(kTensorFileKey) + "' is not a string");
      tensor_file = marker.toStringRef();
    }
    impl_->archive = std::move(archive);
  });
  if (!tensor_file) return;  // a whole Optimizer::save archive
  try {
    impl_->read_split(*tensor_file);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    impl_->fail(detail::first_line_of(e));
  }
}

PendingOptimizerState::~PendingOptimizerState() = default;
PendingOptimizerState::PendingOptimizerState(PendingOptimizerState&&) noexcept = default;
PendingOptimizerState& PendingOptimizerState::operator=(PendingOptimizerState&&) noexcept = default;

void PendingOptimizerState::apply() {
  Impl& impl = *impl_;
  try {
    if (impl.reader) {
      impl.apply_split();
    } else {
      load_optimizer(impl.optimizer, impl.archive);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    impl.fail(detail::first_line_of(e));
  }
}

}  // namespace accelerate::checkpoint
