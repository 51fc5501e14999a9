// Walks the autograd graph behind a tensor, for tests that check what a
// forward recorded (a checkpointed block is one node; its activations are
// not in the graph).
#pragma once

#include <torch/csrc/autograd/function.h>

#include <ATen/core/Tensor.h>

#include <set>
#include <string>
#include <vector>

namespace accelerate {
namespace testing {

// The nodes behind `out` whose name contains `name_part` (empty: all).
inline int graph_nodes(const at::Tensor& out, const std::string& name_part = "") {
  int nodes = 0;
  std::vector<torch::autograd::Node*> stack{out.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (node->name().find(name_part) != std::string::npos) ++nodes;
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  return nodes;
}

}  // namespace testing
}  // namespace accelerate
