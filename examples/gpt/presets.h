// The GPT example's model: the library's GPT-2 (accelerate::models::
// GPT2LMHeadModel, Hugging Face's layout and arithmetic) at the sizes this
// example trains on a CPU. Its folders are Hugging Face GPT-2 folders:
// transformers' GPT2LMHeadModel.from_pretrained loads what the example
// saves, and `gpt generate` loads them back (docs/gpt.md).
#pragma once

#include <accelerate/models/gpt2.h>

#include <cstdint>
#include <string>

namespace gpt {

using Gpt = accelerate::models::GPT2LMHeadModel;

// GPT-2's config at a preset's sizes: "tiny" (~1M parameters at vocab 4096,
// for CI) or "small" (~14M at vocab 8192), with `dropout` as GPT-2's
// resid_pdrop, embd_pdrop and attn_pdrop alike (0: none, the example's
// default, where transformers' is 0.1). Throws std::invalid_argument for
// another name.
accelerate::models::GPT2Config preset_config(const std::string& name, int64_t vocab_size,
                                             double dropout = 0.0);

// Parameters, the tied head counted once (as GPT-2's are counted).
int64_t parameter_count(const Gpt& model);

}  // namespace gpt
