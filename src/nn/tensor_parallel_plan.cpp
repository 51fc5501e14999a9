#include "accelerate/tensor_parallel_plan.h"

#include <string>
#include <vector>

#include "accelerate/errors.h"

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
  std::shared_ptr<torch::nn::Module> module;
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
      if (!item.value()->as<ParallelLinearImpl>() && !item.value()->as<ParallelEmbeddingImpl>()) {
        throw ConfigError("tensor parallel plan: " + item.key() + " (" + item.value()->name() +
                          ") is not a layer tensor parallelism splits (accelerate::ParallelLinear "
                          "or accelerate::ParallelEmbedding)");
      }
      layers.push_back({item.value(), &plan[r]});
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
    if (auto* linear = layer.module->as<ParallelLinearImpl>()) {
      linear->parallelize(layer.rule->style, tp, layer.rule->sequence_parallel);
    } else {
      layer.module->as<ParallelEmbeddingImpl>()->parallelize(layer.rule->style, tp);
    }
  }
}

}  // namespace accelerate
