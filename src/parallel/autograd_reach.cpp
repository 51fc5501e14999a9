#include "parallel/autograd_reach.h"

#include <torch/csrc/autograd/variable.h>

namespace accelerate {
namespace detail {

std::unordered_set<const torch::autograd::Node*> nodes_reachable_from(
    const std::vector<at::Tensor>& outputs) {
  std::unordered_set<const torch::autograd::Node*> reached;
  std::vector<torch::autograd::Node*> to_visit;
  auto visit = [&](torch::autograd::Node* node) {
    if (node != nullptr && reached.insert(node).second) to_visit.push_back(node);
  };
  for (const auto& output : outputs) {
    if (!output.defined() || !output.requires_grad()) continue;
    if (output.grad_fn()) {
      visit(output.grad_fn().get());
    } else {
      visit(torch::autograd::impl::try_get_grad_accumulator(output).get());
    }
  }
  // Iterative, not recursive: graphs of deep models are thousands of nodes deep.
  while (!to_visit.empty()) {
    torch::autograd::Node* node = to_visit.back();
    to_visit.pop_back();
    for (const auto& edge : node->next_edges()) visit(edge.function.get());
  }
  return reached;
}

}  // namespace detail
}  // namespace accelerate
