// Mistral and Qwen2 folders in the Llama model, without the Python
// reference (their logits and gradients against transformers are in
// llama_reference_test.cpp): which layers get a sliding window under each
// model type's rules and defaults, the projections' biases, the config
// written back, and the one-line refusals.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>
#include <tuple>

#include "accelerate/common/errors.h"
#include "accelerate/models/llama.h"
#include "support/error_message.h"
#include "support/temp_dir.h"

namespace am = accelerate::models;
using accelerate::testing::error_of;
using accelerate::testing::TempDir;

namespace {

// A tiny config.json of `model_type` with `extra` keys ("" or `, "key": value`).
am::LlamaConfig read_family(const TempDir& dir, const std::string& model_type,
                            const std::string& extra) {
  std::ofstream(dir.file("config.json"), std::ios::trunc)
      << R"({"model_type": ")" << model_type << R"(", "vocab_size": 40, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2)"
      << extra << "}";
  return am::read_llama_config(dir.path());
}

std::vector<int64_t> layer_windows(const am::LlamaConfig& config) {
  std::vector<int64_t> windows;
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    windows.push_back(config.layer_sliding_window(layer));
  }
  return windows;
}

using Windows = std::vector<int64_t>;

}  // namespace

// transformers' rules: Mistral slides every layer, by 4096 when the key is
// absent and not at all when it is null; Qwen2 slides only with
// use_sliding_window, the layers from max_window_layers (default 28) on,
// or those its layer_types name.
TEST(LlamaFamilies, SlidingWindowsFollowEachModelTypesRules) {
  TempDir dir;
  EXPECT_EQ(layer_windows(read_family(dir, "llama", "")), (Windows{0, 0, 0}));
  EXPECT_EQ(layer_windows(read_family(dir, "mistral", "")), (Windows{4096, 4096, 4096}));
  EXPECT_EQ(layer_windows(read_family(dir, "mistral", R"(, "sliding_window": null)")),
            (Windows{0, 0, 0}));
  EXPECT_EQ(layer_windows(read_family(dir, "mistral", R"(, "sliding_window": 7)")),
            (Windows{7, 7, 7}));
  EXPECT_EQ(layer_windows(read_family(dir, "qwen2", R"(, "sliding_window": 7)")),
            (Windows{0, 0, 0}));
  EXPECT_EQ(layer_windows(read_family(dir, "qwen2", R"(, "use_sliding_window": true)")),
            (Windows{0, 0, 0}));  // max_window_layers 28 > 3 layers
  EXPECT_EQ(layer_windows(read_family(dir, "qwen2",
                                      R"(, "use_sliding_window": true, "max_window_layers": 1)")),
            (Windows{0, 4096, 4096}));
  EXPECT_EQ(layer_windows(read_family(dir, "qwen2",
                                      R"(, "use_sliding_window": true, "sliding_window": 9,
      "max_window_layers": 1, "layer_types": ["sliding_attention", "full_attention",
      "sliding_attention"])")),
            (Windows{9, 0, 9}));
}

// Qwen2's q/k/v projections have biases and o has none; Mistral has none;
// Llama follows attention_bias.
TEST(LlamaFamilies, BiasesAreEachModelTypes) {
  TempDir dir;
  am::LlamaForCausalLM qwen2(read_family(dir, "qwen2", ""));
  const auto& attention = *qwen2->model->layers->at<am::LlamaDecoderLayerImpl>(0).self_attn;
  EXPECT_TRUE(attention.q_proj->bias.defined() && attention.k_proj->bias.defined() &&
              attention.v_proj->bias.defined());
  EXPECT_FALSE(attention.o_proj->bias.defined());
  am::LlamaForCausalLM mistral(read_family(dir, "mistral", ""));
  for (const auto& item : mistral->named_parameters()) {
    EXPECT_EQ(item.key().find("bias"), std::string::npos) << item.key();
  }
}

// What is written reads back the same, under the model type's own keys and
// architecture (so transformers picks MistralForCausalLM/Qwen2ForCausalLM).
TEST(LlamaFamilies, WritesWhatItReadsUnderItsOwnModelType) {
  TempDir dir;
  for (const auto& [type, extra, architecture] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"mistral", R"(, "sliding_window": 6)", "MistralForCausalLM"},
           {"mistral", R"(, "sliding_window": null)", "MistralForCausalLM"},
           {"qwen2", R"(, "use_sliding_window": true, "max_window_layers": 2)", "Qwen2ForCausalLM"},
           {"qwen2", "", "Qwen2ForCausalLM"}}) {
    const am::LlamaConfig config = read_family(dir, type, extra);
    TempDir out;
    am::write_llama_config(config, out.path());
    const am::LlamaConfig back = am::read_llama_config(out.path());
    EXPECT_EQ(back.model_type, config.model_type) << type << extra;
    EXPECT_EQ(layer_windows(back), layer_windows(config)) << type << extra;
    const std::string text = am::llama_config_json(back);
    EXPECT_NE(text.find("\"" + architecture + "\""), std::string::npos) << text;
    EXPECT_NE(text.find("\"model_type\": \"" + type + "\""), std::string::npos) << text;
    EXPECT_EQ(text.find("attention_bias"), std::string::npos) << text;
  }
}

TEST(LlamaFamilies, BadSettingsAreOneLineErrors) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  EXPECT_EQ(
      error_of([&] { read_family(dir, "gemma", ""); }),
      "Llama config '" + path + "': model_type \"gemma\" is not one of llama, mistral, qwen2");
  EXPECT_EQ(error_of([&] { read_family(dir, "mistral", R"(, "sliding_window": 0)"); }),
            "Llama config: sliding_window must be positive, not 0 (in '" + path + "')");
  EXPECT_EQ(error_of([&] {
              read_family(dir, "qwen2",
                          R"(, "use_sliding_window": true, "layer_types": ["full_attention"])");
            }),
            "Llama config: layer_types has 1 entries for 3 layers (in '" + path + "')");
  EXPECT_EQ(error_of([&] {
              read_family(dir, "qwen2",
                          R"(, "use_sliding_window": true, "layer_types": ["chunked", "x", "y"])");
            }),
            "Llama config '" + path +
                "': layer_types entry \"chunked\" is not \"full_attention\" or "
                "\"sliding_attention\"");
  am::LlamaConfig config = read_family(dir, "mistral", "");
  config.attention_bias = true;
  EXPECT_EQ(error_of([&] { config.validate(); }),
            "Llama config: attention_bias and mlp_bias are Llama's; mistral fixes its biases");
}
