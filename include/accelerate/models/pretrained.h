// Weights of a Hugging Face model folder in a LibTorch module whose
// parameter names are transformers' (the models under accelerate/models/):
// model.safetensors, or the model-0000k-of-0000n.safetensors shards that
// model.safetensors.index.json lists.
//
//   accelerate::models::load_pretrained_weights(*model, "Llama-3.2-1B");
//   accelerate::models::save_pretrained_weights(*model, "out", "2GB");
//
// Loading checks everything before it writes anything: a tensor the module
// has and no file holds, a tensor a file holds and the module has no place
// for, or a tensor of another shape each throw accelerate::Error with one
// line naming the tensor (and both shapes). Floating-point tensors are
// converted to the module's dtype (a bf16 checkpoint loads into an fp32
// module, or a bf16 one). Tied weights (one tensor under two names) are
// filled from whichever name the files hold. See docs/models.md.
#pragma once

#include <string>
#include <vector>

#include "accelerate/model_saving.h"

namespace torch::nn {
class Module;
}

namespace accelerate::models {

// `folder`: holds model.safetensors or model.safetensors.index.json.
void load_pretrained_weights(torch::nn::Module& module, const std::string& folder);

// Writes the module's weights as transformers does (accelerate::save_model:
// one file, or shards of at most max_shard_size plus the index; a tied
// weight once, under its first name). Returns the files written.
std::vector<std::string> save_pretrained_weights(
    const torch::nn::Module& module, const std::string& folder,
    const ShardSize& max_shard_size = ShardSize("5GB"));

}  // namespace accelerate::models
