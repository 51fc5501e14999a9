// The GPT-2 models without the Python reference (those comparisons are in
// gpt2_reference_test.cpp): config.json keys, defaults, round trip and
// refusals; transformers' parameter names and Conv1D layout; causality;
// save/load round trips in one file and in shards; bf16 checkpoints; the
// one-line errors for bad folders; gradient checkpointing.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "accelerate/models/gpt2.h"
#include "accelerate/models/pretrained.h"
#include "support/autograd_graph.h"
#include "support/error_message.h"
#include "support/temp_dir.h"

namespace am = accelerate::models;
using accelerate::testing::error_of;
using accelerate::testing::TempDir;

namespace {

am::GPT2Config tiny_gpt2_config(bool tied = true) {
  am::GPT2Config config;
  config.vocab_size = 40;
  config.n_positions = 16;
  config.n_embd = 32;
  config.n_layer = 2;
  config.n_head = 4;
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0;
  config.tie_word_embeddings = tied;
  return config;
}

void write_gpt2_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

at::Tensor gpt2_ids() { return (at::arange(14, at::kLong) * 7).remainder(40).reshape({2, 7}); }

}  // namespace

TEST(GPT2Config, ReadsTransformersKeysWithTheirDefaults) {
  TempDir dir;
  // The hub's gpt2 config.json, shortened: n_ctx and the summary keys are
  // not modelled and must survive a round trip.
  write_gpt2_text(dir.file("config.json"), R"({"activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "bos_token_id": 50256,
    "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
    "n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1,
    "summary_type": "cls_index", "task_specific_params": {"text-generation": {"max_length": 50}},
    "vocab_size": 50257})");
  const am::GPT2Config config = am::read_gpt2_config(dir.path());
  EXPECT_EQ(config.vocab_size, 50257);
  EXPECT_EQ(config.n_embd, 768);
  EXPECT_EQ(config.inner_width(), 3072);  // n_inner absent: 4 * n_embd
  EXPECT_EQ(config.activation_function, am::GPT2Activation::kGeluNew);
  EXPECT_TRUE(config.tie_word_embeddings);  // transformers' default
  EXPECT_TRUE(config.scale_attn_weights);
  EXPECT_EQ(config.other_keys.at("n_ctx"), "1024");
  EXPECT_EQ(config.other_keys.at("task_specific_params"),
            R"({"text-generation":{"max_length":50}})");
  EXPECT_DOUBLE_EQ(config.attention_scaling(0), 1.0 / 8.0);

  // Absent keys: transformers' GPT2Config() defaults.
  write_gpt2_text(dir.file("config.json"), R"({"model_type": "gpt2", "n_layer": 3,
    "activation_function": "swish", "n_inner": 100, "scale_attn_by_inverse_layer_idx": true,
    "scale_attn_weights": false})");
  const am::GPT2Config sparse = am::read_gpt2_config(dir.path());
  EXPECT_EQ(sparse.n_layer, 3);
  EXPECT_EQ(sparse.n_positions, 1024);
  EXPECT_EQ(sparse.n_head, 12);
  EXPECT_DOUBLE_EQ(sparse.resid_pdrop, 0.1);
  EXPECT_EQ(sparse.inner_width(), 100);
  EXPECT_EQ(sparse.activation_function, am::GPT2Activation::kSilu);
  EXPECT_DOUBLE_EQ(sparse.attention_scaling(2), 1.0 / 3.0);  // unscaled, then / (2 + 1)
}

TEST(GPT2Config, WritesWhatItReads) {
  TempDir dir;
  am::GPT2Config config = tiny_gpt2_config(false);
  config.n_inner = 48;
  config.activation_function = am::GPT2Activation::kQuickGelu;
  config.scale_attn_by_inverse_layer_idx = true;
  config.other_keys["eos_token_id"] = "[2, 3]";
  am::write_gpt2_config(config, dir.path(), "GPT2LMHeadModel", "bfloat16");
  const am::GPT2Config back = am::read_gpt2_config(dir.file("config.json"));
  EXPECT_EQ(am::gpt2_config_json(back),
            am::gpt2_config_json(config, "GPT2LMHeadModel", "bfloat16"));
  EXPECT_EQ(back.other_keys.at("eos_token_id"), "[2,3]");
  EXPECT_EQ(back.other_keys.at("torch_dtype"), "\"bfloat16\"");
  EXPECT_EQ(back.n_inner, 48);
  EXPECT_FALSE(back.tie_word_embeddings);
}

TEST(GPT2Config, RefusesWhatItCannotRunInOneLine) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  const auto refusal = [&](const std::string& text) {
    write_gpt2_text(path, text);
    return error_of([&] { am::read_gpt2_config(path); });
  };
  EXPECT_EQ(refusal(R"({"model_type": "gpt2", "reorder_and_upcast_attn": true})"),
            "GPT-2 config '" + path +
                "': \"reorder_and_upcast_attn\": true is not supported (only false)");
  EXPECT_EQ(
      refusal(R"({"add_cross_attention": true})"),
      "GPT-2 config '" + path + "': \"add_cross_attention\": true is not supported (only false)");
  EXPECT_EQ(refusal(R"({"activation_function": "gelu_10"})"),
            "GPT-2 config '" + path +
                "': activation_function \"gelu_10\" is not supported (gelu_new, "
                "gelu_pytorch_tanh, gelu_fast, gelu, relu, silu, quick_gelu)");
  EXPECT_EQ(refusal(R"({"model_type": "llama"})"),
            "GPT-2 config '" + path + "': model_type \"llama\" is not \"gpt2\"");
  EXPECT_EQ(refusal(R"({"n_embd": 100, "n_head": 12})"),
            "GPT-2 config: n_embd 100 is not a multiple of n_head 12 (in '" + path + "')");
  EXPECT_EQ(refusal(R"({"n_inner": 0})"),
            "GPT-2 config '" + path + "': \"n_inner\" must be positive or null, not 0");
  EXPECT_EQ(refusal(R"({"n_layer": 2, "n_layer": 3})").find("GPT-2 config '" + path + "': "), 0u);
}

TEST(GPT2Model, ParameterNamesAndConv1DLayoutAreTransformers) {
  am::GPT2Config config = tiny_gpt2_config(false);
  config.n_layer = 1;
  config.n_inner = 48;
  am::GPT2LMHeadModel model(config);
  std::vector<std::pair<std::string, std::vector<int64_t>>> params;
  for (const auto& item : model->named_parameters()) {
    params.emplace_back(item.key(), item.value().sizes().vec());
  }
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"transformer.wte.weight", {40, 32}},
      {"transformer.wpe.weight", {16, 32}},
      {"transformer.h.0.ln_1.weight", {32}},
      {"transformer.h.0.ln_1.bias", {32}},
      // Conv1D: [in, out].
      {"transformer.h.0.attn.c_attn.weight", {32, 96}},
      {"transformer.h.0.attn.c_attn.bias", {96}},
      {"transformer.h.0.attn.c_proj.weight", {32, 32}},
      {"transformer.h.0.attn.c_proj.bias", {32}},
      {"transformer.h.0.ln_2.weight", {32}},
      {"transformer.h.0.ln_2.bias", {32}},
      {"transformer.h.0.mlp.c_fc.weight", {32, 48}},
      {"transformer.h.0.mlp.c_fc.bias", {48}},
      {"transformer.h.0.mlp.c_proj.weight", {48, 32}},
      {"transformer.h.0.mlp.c_proj.bias", {32}},
      {"transformer.ln_f.weight", {32}},
      {"transformer.ln_f.bias", {32}},
      {"lm_head.weight", {40, 32}}};
  EXPECT_EQ(params, expected);
  config.tie_word_embeddings = true;
  am::GPT2LMHeadModel tied(config);
  EXPECT_EQ(tied->named_parameters().size(), expected.size() - 1);
  EXPECT_FALSE(tied->named_parameters().contains("lm_head.weight"));
}

TEST(GPT2Model, InitialisesAsGpt2) {
  am::GPT2Config config = tiny_gpt2_config();
  config.n_embd = 128;
  config.n_layer = 8;
  config.vocab_size = 400;
  torch::manual_seed(6);
  am::GPT2Model model(config);
  const auto& block = model->h->at<am::GPT2BlockImpl>(3);
  // N(0, 0.02), and the residual projections N(0, 0.02 / sqrt(2 * 8)).
  EXPECT_NEAR(model->wte->weight.std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(block.attn->c_attn->weight.std().item<double>(), 0.02, 0.001);
  EXPECT_NEAR(block.mlp->c_proj->weight.std().item<double>(), 0.005, 0.0003);
  EXPECT_NEAR(block.attn->c_proj->weight.std().item<double>(), 0.005, 0.0005);
  EXPECT_EQ(block.attn->c_attn->bias.abs().max().item<double>(), 0.0);
  EXPECT_TRUE(at::equal(block.ln_1->weight, at::ones({128})));
}

TEST(GPT2Model, ATokenSeesOnlyThePast) {
  torch::manual_seed(7);
  am::GPT2LMHeadModel model(tiny_gpt2_config());
  model->eval();
  at::NoGradGuard no_grad;
  at::Tensor ids = gpt2_ids();
  const at::Tensor before = model->forward(ids);
  ids[0][4] = 39;
  const at::Tensor after = model->forward(ids);
  EXPECT_TRUE(at::equal(before.narrow(1, 0, 4), after.narrow(1, 0, 4)));
  EXPECT_GT((before[0][4] - after[0][4]).abs().max().item<double>(), 1e-3);
  EXPECT_EQ(error_of([&] {
              model->forward(at::zeros({1, 17}, at::kLong));
            }),
            "GPT-2: 17 tokens exceed n_positions 16");
}

TEST(GPT2Model, SavesAndLoadsItsOwnFoldersOneFileAndSharded) {
  for (const bool tied : {false, true}) {
    torch::manual_seed(3);
    am::GPT2LMHeadModel model(tiny_gpt2_config(tied));
    const at::Tensor logits = model->forward(gpt2_ids());
    for (const char* shard : {"5GB", "10KB"}) {
      TempDir dir;
      const auto files = model->save_pretrained(dir.path(), shard);
      EXPECT_EQ(files.size() > 1, std::string(shard) == "10KB");
      EXPECT_EQ(std::filesystem::exists(dir.file("model.safetensors.index.json")),
                std::string(shard) == "10KB");
      // Tied: the head is not saved a second time, as transformers' files.
      bool has_head = false;
      for (const auto& file : files) {
        // save_pretrained names the files (the index among them) relative to the folder.
        if (std::filesystem::path(file).extension() != ".safetensors") continue;
        has_head |= accelerate::SafetensorsReader(dir.file(file)).contains("lm_head.weight");
      }
      EXPECT_EQ(has_head, !tied);
      auto back = am::GPT2LMHeadModelImpl::from_pretrained(dir.path());
      EXPECT_TRUE(at::equal(back->forward(gpt2_ids()), logits)) << tied << " " << shard;
      // The base model reads the head model's files (the head dropped).
      auto base = am::GPT2ModelImpl::from_pretrained(dir.path());
      EXPECT_TRUE(at::equal(base->forward(gpt2_ids()), model->transformer->forward(gpt2_ids())));
    }
  }
}

TEST(GPT2Model, Bf16CheckpointLoadsIntoFp32OrBf16) {
  torch::manual_seed(4);
  am::GPT2LMHeadModel model(tiny_gpt2_config());
  model->to(at::kBFloat16);
  TempDir dir;
  model->save_pretrained(dir.path());
  EXPECT_EQ(am::read_gpt2_config(dir.path()).other_keys.at("torch_dtype"), "\"bfloat16\"");
  auto fp32 = am::GPT2LMHeadModelImpl::from_pretrained(dir.path());
  auto bf16 = am::GPT2LMHeadModelImpl::from_pretrained(dir.path(),
                                                       am::GPT2LoadOptions().dtype(at::kBFloat16));
  const auto saved = model->named_parameters();
  for (const auto& item : fp32->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), at::kFloat) << item.key();
    EXPECT_TRUE(at::equal(item.value(), saved[item.key()].to(at::kFloat))) << item.key();
    const at::Tensor& same = bf16->named_parameters()[item.key()];
    EXPECT_EQ(same.scalar_type(), at::kBFloat16) << item.key();
    EXPECT_TRUE(at::equal(same, saved[item.key()])) << item.key();
  }
}

TEST(GPT2Model, BadFoldersGiveOneLineErrorsAndLeaveTheModelAlone) {
  torch::manual_seed(5);
  am::GPT2LMHeadModel source(tiny_gpt2_config());
  TempDir dir;
  source->save_pretrained(dir.path(), "10KB");  // shards: the error names the shard
  am::GPT2LMHeadModel target(tiny_gpt2_config());
  const at::Tensor before = target->transformer->ln_f->weight.clone();
  const std::string name = "transformer.h.1.mlp.c_fc.weight";
  std::string shard;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string path = entry.path().string();
    if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0 &&
        accelerate::SafetensorsReader(path).contains(name)) {
      shard = path;
    }
  }
  ASSERT_FALSE(shard.empty());
  auto tensors = accelerate::load_safetensors(shard);
  for (auto& [stored, tensor] : tensors) {
    // A Linear's [out, in] where GPT-2's Conv1D has [in, out].
    if (stored == name) tensor = tensor.t().contiguous();
  }
  accelerate::save_safetensors(shard, tensors, {{"format", "pt"}});
  EXPECT_EQ(error_of([&] { am::load_pretrained_weights(*target, dir.path()); }),
            "load_pretrained_weights: tensor '" + name + "' in '" + shard +
                "' has shape [128, 32] but the model's is [32, 128]");
  EXPECT_TRUE(at::equal(target->transformer->ln_f->weight, before));
  EXPECT_EQ(error_of([&] { am::GPT2LMHeadModelImpl::from_pretrained(dir.path()); }),
            "load_pretrained_weights: tensor '" + name + "' in '" + shard +
                "' has shape [128, 32] but the model's is [32, 128]");
}

TEST(GPT2Model, GradientCheckpointingGivesTheSameGradientsWithDropout) {
  am::GPT2Config config = tiny_gpt2_config();
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.2;
  torch::manual_seed(8);
  am::GPT2LMHeadModel model(config);
  model->train();
  auto gradients = [&] {
    model->zero_grad();
    // The same dropout masks in both runs (and, checkpointed, in the recomputation).
    torch::manual_seed(99);
    model->loss(gpt2_ids(), gpt2_ids()).backward();
    std::vector<at::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto plain = gradients();
  EXPECT_FALSE(model->transformer->gradient_checkpointing());
  model->transformer->set_gradient_checkpointing(true);
  const auto checkpointed = gradients();
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(at::equal(plain[i], checkpointed[i])) << i;
  // The last block's output comes from the checkpoint's autograd node: the
  // input of ln_f, found by walking the graph back from the hidden states.
  auto checkpoint_in_graph = [&] {
    return accelerate::testing::graph_nodes(model->transformer->forward(gpt2_ids()), "Checkpoint") >
           0;
  };
  EXPECT_TRUE(checkpoint_in_graph());
  model->transformer->set_gradient_checkpointing(false);
  EXPECT_FALSE(checkpoint_in_graph());
}

// Some tied checkpoints hold the head's copy of wte under lm_head.weight;
// transformers ties it and loads the rest, so do we.
TEST(GPT2Model, TiedModelSkipsAFilesCopyOfTheHead) {
  torch::manual_seed(9);
  am::GPT2LMHeadModel model(tiny_gpt2_config());
  TempDir dir;
  model->save_pretrained(dir.path());
  auto tensors = accelerate::load_safetensors(dir.file("model.safetensors"));
  tensors.emplace_back("lm_head.weight", model->transformer->wte->weight.detach().clone());
  accelerate::save_safetensors(dir.file("model.safetensors"), tensors, {{"format", "pt"}});
  auto back = am::GPT2LMHeadModelImpl::from_pretrained(dir.path());
  EXPECT_TRUE(at::equal(back->forward(gpt2_ids()), model->forward(gpt2_ids())));
}
