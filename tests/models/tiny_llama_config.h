// The tiny Llama the tensor-parallel tests train: 4 heads over 2 key/value
// heads (tp 2 splits both, tp 4 cannot), a vocabulary tp 2 and 4 divide.
#pragma once

#include <cstdint>

#include "accelerate/models/llama.h"

namespace accelerate::testing {

inline models::LlamaConfig tiny_llama_config(int64_t vocab, int64_t tokens) {
  models::LlamaConfig c;
  c.vocab_size = vocab, c.hidden_size = 32, c.intermediate_size = 40;
  c.num_hidden_layers = 2, c.num_attention_heads = 4, c.num_key_value_heads = 2;
  c.max_position_embeddings = tokens;
  return c;
}

}  // namespace accelerate::testing
