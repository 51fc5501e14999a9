#include "sharding/unit_policy.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <map>
#include <tuple>
#include <typeindex>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"
#include "accelerate/nn/parallel_layers.h"

namespace accelerate::sharding {
namespace {

using torch::nn::Module;

constexpr const char* kAcceptedPolicies = "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP";
// Accelerate's spellings (fsdp_plugin.h's), any case when parsed.
constexpr accelerate::detail::EnumName<AutoWrapPolicy> kAutoWrapPolicyNames[] = {
    {AutoWrapPolicy::kTransformerBased, "TRANSFORMER_BASED_WRAP"},
    {AutoWrapPolicy::kSizeBased, "SIZE_BASED_WRAP"},
    {AutoWrapPolicy::kNoWrap, "NO_WRAP"},
    {AutoWrapPolicy::kRepeatedBlocks, "REPEATED_BLOCKS"}};
static_assert(accelerate::detail::names_are_distinct(kAutoWrapPolicyNames));

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Parameters get small integer ids so that subtrees can be compared as sorted
// id lists. A tied parameter is the same tensor under two names, or (once
// parameters are views into flat buffers) a view of the same memory with
// the same shape: both get one id, so they are counted once.
class ParameterIds {
 public:
  int id_of(const at::Tensor& tensor) {
    auto inserted = ids_.emplace(key_of(tensor), static_cast<int>(numels_.size()));
    if (inserted.second) numels_.push_back(tensor.numel());
    return inserted.first->second;
  }
  int64_t numel(const std::vector<int>& ids) const {
    int64_t total = 0;
    for (int id : ids) total += numels_[id];
    return total;
  }
  std::size_t size() const { return numels_.size(); }

 private:
  using Key = std::tuple<const void*, int64_t, std::vector<int64_t>, std::vector<int64_t>, int>;
  static Key key_of(const at::Tensor& tensor) {
    // Empty tensors may all sit at one null address: they are only
    // themselves.
    if (tensor.has_storage() && tensor.numel() > 0) {
      return Key(tensor.storage().unsafeGetStorageImpl(), tensor.storage_offset(),
                 tensor.sizes().vec(), tensor.strides().vec(),
                 static_cast<int>(tensor.scalar_type()));
    }
    return Key(tensor.unsafeGetTensorImpl(), -1, {}, {}, 0);
  }

  std::map<Key, int> ids_;
  std::vector<int64_t> numels_;
};

// One module where apply() and named_modules() meet it. A module registered
// at two places appears twice; only its first occurrence can become a unit,
// as PyTorch visits a shared module once.
struct Node {
  Module* module = nullptr;
  std::string path;
  int parent = -1;
  bool first_visit = true;
  std::vector<int> children;
  std::vector<int> parameters;               // its own (not its children's), by id
  std::vector<std::string> parameter_names;  // the same, dotted from the root
};

void walk_into(Module& module, const std::string& path, int parent,
               std::unordered_set<const Module*>& seen, ParameterIds& ids,
               std::vector<Node>& nodes) {
  const int index = static_cast<int>(nodes.size());
  Node node;
  node.module = &module;
  node.path = path;
  node.parent = parent;
  node.first_visit = seen.insert(&module).second;
  // named_parameters leaves out undefined ones (a Linear without bias).
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    node.parameters.push_back(ids.id_of(item.value()));
    node.parameter_names.push_back(join_name(path, item.key()));
  }
  nodes.push_back(std::move(node));
  if (parent >= 0) nodes[parent].children.push_back(index);
  for (const auto& child : module.named_children()) {
    walk_into(*child.value(), join_name(path, child.key()), index, seen, ids, nodes);
  }
}

// The whole tree in pre-order: nodes[0] is the root, a child comes after its
// parent.
std::vector<Node> walk(Module& root, ParameterIds& ids) {
  std::vector<Node> nodes;
  std::unordered_set<const Module*> seen;
  walk_into(root, "", -1, seen, ids, nodes);
  return nodes;
}

std::vector<int> merged(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  out.reserve(a.size() + b.size());
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// Per node, the sorted ids of the parameters in its subtree. Children come
// after their parents, so one backward pass fills them.
std::vector<std::vector<int>> subtree_parameters(const std::vector<Node>& nodes) {
  std::vector<std::vector<int>> subtree(nodes.size());
  for (std::size_t i = nodes.size(); i-- > 0;) {
    std::vector<int> own = nodes[i].parameters;
    std::sort(own.begin(), own.end());
    own.erase(std::unique(own.begin(), own.end()), own.end());
    subtree[i] = merged(subtree[i], own);
    if (nodes[i].parent >= 0)
      subtree[nodes[i].parent] = merged(subtree[nodes[i].parent], subtree[i]);
  }
  return subtree;
}

// The part of a demangled C++ type name after its last "::" outside
// template arguments.
std::string last_component(const std::string& name) {
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (depth == 0 && name.compare(i, 2, "::") == 0) start = i + 2;
  }
  return name.substr(start);
}

// LibTorch's TORCH_MODULE(Block) names the class BlockImpl; users write
// Block (and Accelerate's users, the Python class's name).
std::string without_impl(const std::string& name) {
  const std::string suffix = "Impl";
  const std::string last = last_component(name);
  if (last.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return name.substr(0, name.size() - suffix.size());
  }
  return name;
}

bool class_matches(const std::string& type_name, const std::string& wanted) {
  std::string want = without_impl(wanted);
  if (want.compare(0, 2, "::") == 0) want.erase(0, 2);
  const std::string have = without_impl(type_name);
  if (have == want) return true;
  const std::string tail = "::" + want;
  return have.size() > tail.size() &&
         have.compare(have.size() - tail.size(), tail.size(), tail) == 0;
}

std::string short_class_name(const std::string& type_name) {
  return last_component(without_impl(type_name));
}

std::vector<Unit> to_units(const std::vector<int>& indices, const std::vector<Node>& nodes,
                           const std::vector<std::vector<int>>& subtree, const ParameterIds& ids) {
  std::vector<Unit> units;
  for (int i : indices) {
    units.push_back(Unit{nodes[i].path, nodes[i].module, ids.numel(subtree[i])});
  }
  return units;
}

std::vector<int> transformer_units(const std::vector<Node>& nodes,
                                   const std::vector<std::string>& classes) {
  if (classes.empty()) {
    throw ConfigError(
        "fsdp_transformer_layer_cls_to_wrap is empty: TRANSFORMER_BASED_WRAP needs the class "
        "names of the model's layers (e.g. Block)");
  }
  // Accelerate looks every class up in the whole model, the root included,
  // and refuses one it cannot find, as FSDP does.
  for (const std::string& wanted : classes) {
    const bool found = std::any_of(nodes.begin(), nodes.end(), [&](const Node& node) {
      return class_matches(node.module->name(), wanted);
    });
    if (found) continue;
    std::vector<std::string> names;
    for (const Node& node : nodes) {
      const std::string name = short_class_name(node.module->name());
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
    std::string listed;
    for (const std::string& name : names) listed += (listed.empty() ? "" : ", ") + name;
    throw ConfigError("fsdp_transformer_layer_cls_to_wrap: no module of class '" + wanted +
                      "' in the model (its classes: " + listed + ")");
  }
  // Pre-order, not looking inside a unit: the outermost match wins.
  std::vector<int> units;
  std::vector<int> pending = {0};
  while (!pending.empty()) {
    const int i = pending.back();
    pending.pop_back();
    const Node& node = nodes[i];
    if (!node.first_visit) continue;
    const bool matches = std::any_of(
        classes.begin(), classes.end(),
        [&](const std::string& wanted) { return class_matches(node.module->name(), wanted); });
    if (i != 0 && matches) {
      units.push_back(i);
      continue;
    }
    pending.insert(pending.end(), node.children.rbegin(), node.children.rend());
  }
  return units;
}

// PyTorch's _recursive_wrap with size_based_auto_wrap_policy, which wraps
// nested modules: returns the ids it counts as wrapped in node i's subtree
// (all of it when i itself is wrapped), and records in `wrapped` every
// module it would wrap.
std::vector<int> size_based_wrap(int i, int64_t min_num_params, const std::vector<Node>& nodes,
                                 const std::vector<std::vector<int>>& subtree,
                                 const ParameterIds& ids, std::vector<int>& wrapped) {
  const Node& node = nodes[i];
  if (!node.first_visit) return {};
  // PyTorch's FORCE_LEAF_MODULES: neither recursed into nor wrapped.
  const bool leaf = dynamic_cast<torch::nn::MultiheadAttentionImpl*>(node.module) != nullptr;
  if (ids.numel(subtree[i]) < min_num_params || leaf) return {};
  std::vector<int> below;
  for (int child : node.children) {
    below = merged(below, size_based_wrap(child, min_num_params, nodes, subtree, ids, wrapped));
  }
  std::vector<int> remainder;
  std::set_difference(subtree[i].begin(), subtree[i].end(), below.begin(), below.end(),
                      std::back_inserter(remainder));
  // PyTorch's EXCLUDE_WRAP_MODULES; the root is wrapped by the caller, not
  // by the policy (only_wrap_children).
  const bool excluded = dynamic_cast<torch::nn::ModuleListImpl*>(node.module) != nullptr ||
                        dynamic_cast<torch::nn::ModuleDictImpl*>(node.module) != nullptr;
  if (i != 0 && !excluded && ids.numel(remainder) >= min_num_params) {
    wrapped.push_back(i);
    return subtree[i];
  }
  return below;
}

std::vector<int> size_based_units(const std::vector<Node>& nodes,
                                  const std::vector<std::vector<int>>& subtree,
                                  const ParameterIds& ids, int64_t min_num_params) {
  // Accelerate drops the policy for fsdp_min_num_params 0: every module,
  // even one without parameters, would qualify.
  if (min_num_params <= 0) return {};
  std::vector<int> wrapped;
  size_based_wrap(0, min_num_params, nodes, subtree, ids, wrapped);
  // PyTorch nests a wrapped module inside another when the outer one's
  // leftover alone reaches the threshold. Units do not nest: the inner ones
  // stay units and the outer one's leftover stays outside, as gathered as it
  // is for the outer module's whole forward under FSDP. So the units are the
  // wrapped modules with no wrapped descendant.
  std::unordered_set<int> is_wrapped(wrapped.begin(), wrapped.end());
  std::unordered_set<int> has_wrapped_below;
  for (int i : wrapped) {
    for (int up = nodes[i].parent; up >= 0; up = nodes[up].parent) has_wrapped_below.insert(up);
  }
  std::vector<int> units;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    if (is_wrapped.count(i) && !has_wrapped_below.count(i)) units.push_back(i);
  }
  return units;
}

// LibTorch's layers and the ones tensor parallelism splits
// (parallel_layers.h): what a model's blocks are made of, never blocks
// themselves.
bool is_layer(torch::nn::Module& module) {
  return module.name().compare(0, 11, "torch::nn::") == 0 ||
         dynamic_cast<TensorParallelLayer*>(&module) != nullptr;
}

std::vector<int> repeated_block_units(const std::vector<Node>& nodes,
                                      const std::vector<std::vector<int>>& subtree) {
  // A group: the children of one module that have one type and parameters.
  // Better: of the model's own class (not a layer), then more members, then
  // earlier in pre-order.
  std::vector<int> best;
  bool best_own_class = false;
  for (const Node& node : nodes) {
    if (!node.first_visit) continue;
    std::vector<std::pair<std::type_index, std::vector<int>>> groups;
    for (int child : node.children) {
      if (!nodes[child].first_visit || subtree[child].empty()) continue;
      const std::type_index type(typeid(*nodes[child].module));
      auto group = std::find_if(groups.begin(), groups.end(),
                                [&](const auto& entry) { return entry.first == type; });
      if (group == groups.end()) {
        groups.emplace_back(type, std::vector<int>{child});
      } else {
        group->second.push_back(child);
      }
    }
    for (const auto& group : groups) {
      if (group.second.size() < 2) continue;
      const bool own_class = !is_layer(*nodes[group.second.front()].module);
      if (std::make_pair(own_class, group.second.size()) >
          std::make_pair(best_own_class, best.size())) {
        best = group.second;
        best_own_class = own_class;
      }
    }
  }
  return best;
}

}  // namespace

AutoWrapPolicy parse_auto_wrap_policy(const std::string& value) {
  const auto policy = accelerate::detail::parse_enum(kAutoWrapPolicyNames, value,
                                                     accelerate::detail::NameCase::kAnyCase);
  // REPEATED_BLOCKS names the policy in messages but is no value of the key.
  if (policy && *policy != AutoWrapPolicy::kRepeatedBlocks) return *policy;
  throw ConfigError("fsdp_auto_wrap_policy: '" + value + "' is not one of " + kAcceptedPolicies);
}

const char* to_string(AutoWrapPolicy policy) {
  return accelerate::detail::enum_name(kAutoWrapPolicyNames, policy, "?");
}

std::vector<std::string> parse_layer_classes(const std::string& value) {
  std::vector<std::string> classes;
  std::size_t start = 0;
  while (start <= value.size()) {
    std::size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    std::size_t first = start, last = end;
    while (first < last && std::isspace(static_cast<unsigned char>(value[first]))) ++first;
    while (last > first && std::isspace(static_cast<unsigned char>(value[last - 1]))) --last;
    if (last > first) classes.push_back(value.substr(first, last - first));
    start = end + 1;
  }
  return classes;
}

std::vector<Unit> find_units(Module& root, const UnitPolicy& policy) {
  ParameterIds ids;
  const std::vector<Node> nodes = walk(root, ids);
  const std::vector<std::vector<int>> subtree = subtree_parameters(nodes);
  std::vector<int> indices;
  switch (policy.policy) {
    case AutoWrapPolicy::kTransformerBased:
      indices = transformer_units(nodes, policy.layer_classes);
      break;
    case AutoWrapPolicy::kSizeBased:
      indices = size_based_units(nodes, subtree, ids, policy.min_num_params);
      break;
    case AutoWrapPolicy::kNoWrap:
      break;  // the root, which is never listed, is the only unit
    case AutoWrapPolicy::kRepeatedBlocks:
      indices = repeated_block_units(nodes, subtree);
      break;
  }
  return to_units(indices, nodes, subtree, ids);
}

std::vector<std::string> shared_parameter_names(Module& root, const std::vector<Unit>& units) {
  ParameterIds ids;
  const std::vector<Node> nodes = walk(root, ids);
  std::unordered_map<const Module*, int> unit_of;
  for (std::size_t u = 0; u < units.size(); ++u) {
    unit_of.emplace(units[u].module, static_cast<int>(u));
  }
  // Every occurrence of a module counts (a module registered twice puts its
  // parameters at both places). -1: outside all units.
  std::vector<int> owner(nodes.size(), -1);
  std::vector<std::vector<int>> owners_of(ids.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto unit = unit_of.find(nodes[i].module);
    owner[i] = unit != unit_of.end()  ? unit->second
               : nodes[i].parent >= 0 ? owner[nodes[i].parent]
                                      : -1;
    for (int id : nodes[i].parameters) {
      auto& owners = owners_of[id];
      if (std::find(owners.begin(), owners.end(), owner[i]) == owners.end()) {
        owners.push_back(owner[i]);
      }
    }
  }
  std::vector<std::string> names;
  for (const Node& node : nodes) {
    for (std::size_t k = 0; k < node.parameters.size(); ++k) {
      if (owners_of[node.parameters[k]].size() > 1) names.push_back(node.parameter_names[k]);
    }
  }
  return names;
}

}  // namespace accelerate::sharding
