// The model families examples/finetune fine-tunes, chosen by config.json's
// "model_type" (as transformers' AutoModelForCausalLM does). A family is a
// struct with what the program needs of it; adding one (GPT-2, ...) is a
// struct here and one line in finetune.cpp's table:
//
//   struct Family {
//     using Model = ...;                                  // a TORCH_MODULE holder
//     using Config = ...;
//     static Config read_config(const std::string& folder);
//     static std::string model_type_of(const Config&);    // "llama", "gpt2", ...
//     static int64_t max_positions(const Config&);        // the longest block
//     static constexpr const char* kMaxPositionsKey = ...;  // its config.json key
//     static int64_t vocab_size(const Config&);
//     static Model load(const std::string& folder);       // config + weights
//     static at::Tensor loss(Model&, const at::Tensor& ids);  // mean causal-LM loss
//     static void set_gradient_checkpointing(Model&, bool);   // --gradient_checkpointing
//     static void write_config(const Config&, const std::string& folder,
//                              const std::string& dtype);        // torch_dtype
//   };
#pragma once

#include <accelerate/models/gpt2.h>
#include <accelerate/models/gpt2_config.h>
#include <accelerate/models/llama.h>
#include <accelerate/models/llama_config.h>
#include <accelerate/models/pretrained.h>

#include <cstdint>
#include <string>

namespace finetune {

// Llama 2, Llama 3.x and the model types built from their blocks, Mistral
// and Qwen2 (accelerate/models/llama.h).
struct LlamaFamily {
  using Model = accelerate::models::LlamaForCausalLM;
  using Config = accelerate::models::LlamaConfig;

  static Config read_config(const std::string& folder) {
    return accelerate::models::read_llama_config(folder);
  }
  static std::string model_type_of(const Config& config) {
    return accelerate::models::model_type_name(config.model_type);
  }
  static int64_t max_positions(const Config& config) { return config.max_position_embeddings; }
  static constexpr const char* kMaxPositionsKey = "max_position_embeddings";
  static int64_t vocab_size(const Config& config) { return config.vocab_size; }
  // fp32 parameters whatever the checkpoint's dtype: the optimizer's
  // masters; --bf16 runs the arithmetic in bfloat16 on top.
  static Model load(const std::string& folder) {
    return Model(accelerate::models::LlamaForCausalLMImpl::from_pretrained(folder));
  }
  static at::Tensor loss(Model& model, const at::Tensor& ids) { return model->loss(ids, ids); }
  static void set_gradient_checkpointing(Model& model, bool on) {
    model->model->set_gradient_checkpointing(on);
  }
  // `dtype`: the saved weights' ("float32", or "bfloat16" from a 16-bit save).
  static void write_config(const Config& config, const std::string& folder,
                           const std::string& dtype) {
    accelerate::models::write_llama_config(config, folder, dtype);
  }
};

// GPT-2 (accelerate/models/gpt2.h): a GPT2LMHeadModel's folder or a base
// GPT2Model's, such as the hub's gpt2.
struct Gpt2Family {
  using Model = accelerate::models::GPT2LMHeadModel;
  using Config = accelerate::models::GPT2Config;

  static Config read_config(const std::string& folder) {
    return accelerate::models::read_gpt2_config(folder);
  }
  static std::string model_type_of(const Config&) { return "gpt2"; }
  static int64_t max_positions(const Config& config) { return config.n_positions; }
  static constexpr const char* kMaxPositionsKey = "n_positions";
  static int64_t vocab_size(const Config& config) { return config.vocab_size; }
  static Model load(const std::string& folder) {
    return Model(accelerate::models::GPT2LMHeadModelImpl::from_pretrained(folder));
  }
  static at::Tensor loss(Model& model, const at::Tensor& ids) { return model->loss(ids, ids); }
  static void set_gradient_checkpointing(Model& model, bool on) {
    model->transformer->set_gradient_checkpointing(on);
  }
  static void write_config(const Config& config, const std::string& folder,
                           const std::string& dtype) {
    accelerate::models::write_gpt2_config(config, folder, "GPT2LMHeadModel", dtype);
  }
};

}  // namespace finetune
