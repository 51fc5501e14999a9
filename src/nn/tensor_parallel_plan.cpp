#include "accelerate/nn/tensor_parallel_plan.h"

#include <string>
#include <unordered_set>
#include <vector>

#include "accelerate/common/errors.h"

namespace accelerate {
namespace {

std::vector<std::string> dotted_names(const std::string& text) {
  std::vector<std::string> names;
  std::string::size_type from = 0;
  while (true) {
    const auto dot = text.find('.', from);
    names.push_back(text.substr(from, dot == std::string::npos ? std::string::npos : dot - from));
    if (dot == std::string::npos) return names;
    from = dot + 1;
  }
}

// The module a rule picked, and which rule.
struct PlannedLayer {
  TensorParallelLayer* layer;  // a module of the model's, which outlives the plan's use
  const TensorParallelRule* rule;
};

}  // namespace

TensorParallelPlan parse_tensor_parallel_plan(
    const std::vector<std::pair<std::string, std::string>>& words) {
  TensorParallelPlan plan;
  for (const auto& [pattern, word] : words) {
    const std::optional<TensorParallelStyle> style = parse_tensor_parallel_style(word);
    if (!style) {
      throw ConfigError("tensor parallel plan: '" + pattern + "' has style '" + word +
                        "', not one of replicate, colwise, colwise_rep, rowwise");
    }
    plan.push_back({pattern, *style});
  }
  return plan;
}

bool tensor_parallel_pattern_matches(const std::string& pattern, const std::string& name) {
  const std::vector<std::string> wanted = dotted_names(pattern), parts = dotted_names(name);
  if (wanted.size() != parts.size()) return false;
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    if (wanted[i] != "*" && wanted[i] != parts[i]) return false;
  }
  return true;
}

void parallelize_module(torch::nn::Module& module, const TensorParallelPlan& plan,
                        const TensorParallel& tp) {
  std::vector<PlannedLayer> layers;
  std::vector<bool> used(plan.size(), false);
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    for (std::size_t r = 0; r < plan.size(); ++r) {
      if (!tensor_parallel_pattern_matches(plan[r].pattern, item.key())) continue;
      used[r] = true;
      auto* layer = dynamic_cast<TensorParallelLayer*>(item.value().get());
      if (layer == nullptr) {
        throw ConfigError("tensor parallel plan: " + item.key() + " (" + item.value()->name() +
                          ") is not a layer tensor parallelism splits (an "
                          "accelerate::TensorParallelLayer such as ParallelLinear or "
                          "ParallelEmbedding)");
      }
      layers.push_back({layer, &plan[r]});
      break;
    }
  }
  for (std::size_t r = 0; r < plan.size(); ++r) {
    if (!used[r]) {
      throw ConfigError("tensor parallel plan: '" + plan[r].pattern +
                        "' names no module of the model");
    }
  }
  for (const PlannedLayer& layer : layers) {
    layer.layer->parallelize(layer.rule->style, tp, layer.rule->sequence_parallel);
  }
}

namespace {

// Calls `visit(layer name, group, parts)` for each split layer of `module`.
template <typename Visit>
void for_each_split_layer(const torch::nn::Module& module, Visit visit) {
  for (const auto& item : module.named_modules("", /*include_self=*/true)) {
    const auto* layer = dynamic_cast<const TensorParallelLayer*>(item.value().get());
    if (layer == nullptr) continue;
    std::vector<TensorParallelPart> parts = layer->split_parts();
    if (!parts.empty()) visit(item.key(), layer->tensor_parallel(), parts);
  }
}

}  // namespace

std::vector<TensorParallelPart> tensor_parallel_parts(const torch::nn::Module& module) {
  std::vector<TensorParallelPart> parts;
  std::unordered_set<const c10::TensorImpl*> seen;  // a tied head is its embedding
  for_each_split_layer(module, [&](const std::string&, const TensorParallel&,
                                   const std::vector<TensorParallelPart>& split) {
    for (const TensorParallelPart& part : split) {
      if (seen.insert(part.tensor.unsafeGetTensorImpl()).second) parts.push_back(part);
    }
  });
  return parts;
}

ScopeGuard whole_tensor_parallel_weights(torch::nn::Module& module) {
  struct Held {
    TensorParallelPart split;
    at::Tensor part;  // the tensor's own data (a view into a ZeRO buffer, say)
  };
  auto held = std::make_shared<std::vector<Held>>();
  at::NoGradGuard no_grad;
  for (const TensorParallelPart& split : tensor_parallel_parts(module)) {
    held->push_back({split, split.tensor.variable_data()});
  }
  for (Held& h : *held) {
    at::Tensor tensor = h.split.tensor;
    tensor.set_data(gather_whole(h.part, h.split));
  }
  return ScopeGuard([held] {
    at::NoGradGuard no_grad;
    for (Held& h : *held) {
      at::Tensor tensor = h.split.tensor;
      h.part.copy_(part_of_whole(tensor.detach(), h.split));
      tensor.set_data(h.part);
    }
  });
}

int tensor_parallel_size_of(const torch::nn::Module& module) {
  int size = 1;
  std::string first;
  for_each_split_layer(module, [&](const std::string& name, const TensorParallel& tp,
                                   const std::vector<TensorParallelPart>&) {
    if (size == 1) {
      size = tp.size();
      first = name;
    } else if (tp.size() != size) {
      throw ConfigError("tensor parallelism: " + first + " is split over tp_size " +
                        std::to_string(size) + " but " + name + " over " +
                        std::to_string(tp.size()));
    }
  });
  return size;
}

}  // namespace accelerate
