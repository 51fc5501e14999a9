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
// models have plans of their own (LlamaForCausalLMImpl::parallelize), and
// Accelerator::prepare applies them at tp_size above 1 (TensorParallelModel).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "accelerate/common/scope_guard.h"
#include "accelerate/nn/parallel_layers.h"

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

// A model that splits itself by its own plan: Accelerator::prepare calls
// parallelize with its tensor-parallel group when tp_size is above 1 and the
// model is not split yet. The library's models are TensorParallelModels; a
// program's own model can be one, or be split by parallelize_module before
// prepare.
class TensorParallelModel {
 public:
  virtual ~TensorParallelModel() = default;
  virtual void parallelize(const TensorParallel& tp) = 0;
  // The group the model is split over (size 1 before parallelize).
  virtual const TensorParallel& tensor_parallel() const = 0;
};

// The parameters of `module`'s split layers that each rank of their group
// holds a different part of (split weights, a colwise layer's bias), each
// once, with where each lies in its whole (tensor_parallel.h); the other
// parameters (norms, replicated layers, a rowwise bias) are whole and equal
// on every rank of the group.
std::vector<TensorParallelPart> tensor_parallel_parts(const torch::nn::Module& module);
// Until the guard goes, every split layer of `module` holds its whole
// weights, gathered from its group (collective: every process of the group
// calls it), as the unsplit model holds them; when it goes, each takes back
// its part of them (what a load wrote into the whole included), in the
// tensors it had. For saving split models as whole ones.
ScopeGuard whole_tensor_parallel_weights(torch::nn::Module& module);
// The size of the group `module`'s layers are split over: 1 when none is
// split. Error (one line) for layers split over groups of different sizes.
int tensor_parallel_size_of(const torch::nn::Module& module);

}  // namespace accelerate
