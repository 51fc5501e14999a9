// Loading and saving of the GPT-2 models (include/accelerate/models/gpt2.h)
// through load_pretrained_weights with transformers' rules for GPT-2: base
// prefix "transformer", and the attn.bias / attn.masked_bias buffers older
// files (the hub's gpt2 among them) hold skipped, as transformers'
// _keys_to_ignore_on_load_unexpected does. The Conv1D weights need no
// conversion: the modules hold them in the files' [in, out] layout.
#include <ATen/ATen.h>

#include "accelerate/common/errors.h"
#include "accelerate/models/gpt2.h"
#include "accelerate/models/pretrained.h"
#include "models/config_json.h"
#include "models/parallel_checks.h"
#include "models/pretrained_build.h"

namespace accelerate::models {
namespace {

PretrainedLoadOptions gpt2_load_rules(bool tied) {
  std::vector<std::string> ignored = {".attn.bias", ".attn.masked_bias"};
  // A tied model's head is wte: a file's copy of it has nowhere to go.
  if (tied) ignored.push_back("lm_head.weight");
  return PretrainedLoadOptions().base_model_prefix("transformer").ignore_unexpected(ignored);
}

}  // namespace

std::shared_ptr<GPT2ModelImpl> GPT2ModelImpl::from_pretrained(const std::string& folder,
                                                              const GPT2LoadOptions& options) {
  const GPT2Config config = read_gpt2_config(folder);
  return build_pretrained<GPT2ModelImpl>(
      [&config] { return std::make_shared<GPT2ModelImpl>(config); }, folder, options.dtype(),
      gpt2_load_rules(/*tied=*/true));
}

std::vector<std::string> GPT2ModelImpl::save_pretrained(const std::string& folder,
                                                        const ShardSize& max_shard_size) const {
  auto files = save_pretrained_weights(*this, folder, max_shard_size);
  write_gpt2_config(config_, folder, "GPT2Model", saved_dtype_name(*this));
  return files;
}

std::shared_ptr<GPT2LMHeadModelImpl> GPT2LMHeadModelImpl::from_pretrained(
    const std::string& folder, const GPT2LoadOptions& options) {
  const GPT2Config config = read_gpt2_config(folder);
  return build_pretrained<GPT2LMHeadModelImpl>(
      [&config] { return std::make_shared<GPT2LMHeadModelImpl>(config); }, folder, options.dtype(),
      gpt2_load_rules(config.tie_word_embeddings));
}

std::vector<std::string> GPT2LMHeadModelImpl::save_pretrained(
    const std::string& folder, const ShardSize& max_shard_size) const {
  refuse_saving_split("GPT-2", tensor_parallel());
  auto files = save_pretrained_weights(*this, folder, max_shard_size);
  write_gpt2_config(config_, folder, "GPT2LMHeadModel", saved_dtype_name(*this));
  return files;
}

}  // namespace accelerate::models
