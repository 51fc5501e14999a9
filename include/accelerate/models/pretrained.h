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
// filled from whichever name the files hold.
//
// Models with a head over a base model (BertForSequenceClassification over
// "bert.") say so in PretrainedLoadOptions, and then load both layouts as
// transformers does: a base model's files (no "bert.") into the model with
// the head, and a headed model's files into the base model (the head's
// tensors are dropped then). See docs/models.md.
#pragma once

#include <string>
#include <vector>

#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/common/arg.h"

namespace torch::nn {
class Module;
}

namespace accelerate::models {

struct PretrainedLoadOptions {
  // transformers' base_model_prefix ("bert"); empty: names are taken as
  // they are. When the module's names start with "prefix." and the files'
  // do not, the files' names get it; when the files' do and the module's
  // do not, it is stripped and the files' other tensors (a head's) skipped.
  ACCELERATE_ARG(std::string, base_model_prefix) = "";
  // Tensors of the files skipped when their name contains one of these
  // (transformers' _keys_to_ignore_on_load_unexpected: BERT's older files
  // hold a "position_ids" buffer; pre-training heads "cls." a classifier
  // does not use).
  ACCELERATE_ARG(std::vector<std::string>, ignore_unexpected) = {};
  // Tensors of the module that may be absent from the files, by name
  // prefix ("classifier."): they keep their initial values, as
  // transformers initialises a new head on a pretrained base.
  ACCELERATE_ARG(std::vector<std::string>, allow_missing) = {};
};

// What a load did beyond filling every tensor from its file.
struct PretrainedLoadReport {
  std::vector<std::string> kept_initial;  // the module's tensors no file held (allow_missing)
  std::vector<std::string> skipped;       // the files' tensors that were not loaded
};

// `folder`: holds model.safetensors or model.safetensors.index.json.
PretrainedLoadReport load_pretrained_weights(torch::nn::Module& module, const std::string& folder,
                                             const PretrainedLoadOptions& options = {});

// The name config.json's torch_dtype gives the weights `folder` holds
// ("float32", "bfloat16", "float16": its first floating-point tensor's), for
// a program that saved them another way (Accelerator::save_model under
// ZeRO-3's 16-bit save) and writes the config after. Throws accelerate::Error
// as load_pretrained_weights does for a folder without weights.
std::string saved_weights_dtype(const std::string& folder);

// Writes the module's weights as transformers does (accelerate::save_model:
// one file, or shards of at most max_shard_size plus the index; a tied
// weight once, under its first name). Returns the files written.
std::vector<std::string> save_pretrained_weights(
    const torch::nn::Module& module, const std::string& folder,
    const ShardSize& max_shard_size = ShardSize("5GB"));

}  // namespace accelerate::models
