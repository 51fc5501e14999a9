// A tensor-parallel plan: which layers of a model tensor parallelism splits,
// and how, by module names, in transformers' tp_plan words:
//
//   accelerate::TensorParallelPlan plan = accelerate::parse_tensor_parallel_plan({
//       {"blocks.*.attention.qkv", "colwise"}, {"blocks.*.attention.out", "rowwise"},
//       {"blocks.*.mlp.up", "colwise"},        {"blocks.*.mlp.down", "rowwise"}});
//   accelerate::parallelize_module(*model, plan, tp);
//
// A pattern is a dotted module name in which `*` stands for any one name
// (a layer's index), as transformers writes its plans. The layers a plan
// names must be accelerate::ParallelLinear or ParallelEmbedding
// (parallel_layers.h): C++ cannot change what another module's forward
// calls, so a model written with torch::nn::Linear is given those in its
// place (same options, names and initialisation) to be split. The library's
// models have plans of their own (LlamaForCausalLMImpl::parallelize).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "accelerate/parallel_layers.h"

namespace accelerate {

struct TensorParallelRule {
  std::string pattern;  // "model.layers.*.self_attn.q_proj"
  TensorParallelStyle style = TensorParallelStyle::kReplicate;
  // Megatron's sequence parallelism for this layer (ParallelLinear::parallelize).
  bool sequence_parallel = false;
};
using TensorParallelPlan = std::vector<TensorParallelRule>;

// From (pattern, transformers' style word) pairs. Error (one line) naming
// the pattern for a word that is not one of replicate, colwise,
// colwise_rep, rowwise.
TensorParallelPlan parse_tensor_parallel_plan(
    const std::vector<std::pair<std::string, std::string>>& words);

// Whether `pattern` names the module `name` ("a.*.b" names "a.3.b").
bool tensor_parallel_pattern_matches(const std::string& pattern, const std::string& name);

// Splits every layer of `module` the plan names (the first rule that names
// a module decides its style). Errors (one line), before any layer is split:
// a rule that names no module of `module`, or names one that is not a
// ParallelLinear or ParallelEmbedding (its name and type given); then the
// layers' own refusals (parallelize(); the layers before are split by then,
// so build the model again). A group of one splits nothing, but
// the plan is checked all the same.
void parallelize_module(torch::nn::Module& module, const TensorParallelPlan& plan,
                        const TensorParallel& tp);

}  // namespace accelerate
