#include "presets.h"

#include <stdexcept>

namespace gpt {

accelerate::models::GPT2Config preset_config(const std::string& name, int64_t vocab_size,
                                             double dropout) {
  accelerate::models::GPT2Config config;
  config.vocab_size = vocab_size;
  if (name == "tiny") {
    config.n_positions = 128, config.n_embd = 128, config.n_layer = 4, config.n_head = 4;
  } else if (name == "small") {
    config.n_positions = 256, config.n_embd = 384, config.n_layer = 6, config.n_head = 6;
  } else {
    throw std::invalid_argument("unknown GPT preset '" + name + "' (tiny, small)");
  }
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = dropout;
  return config;
}

int64_t parameter_count(const Gpt& model) {
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();  // wte once: the head is it
  return count;
}

}  // namespace gpt
