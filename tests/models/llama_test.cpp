// The Llama model without the Python reference (those comparisons are in
// llama_reference_test.cpp): config.json in both transformers spellings,
// parameter names, the llama3 rope bands, building and loading without
// weights (ZeRO-3's zero3_init), save/load round trips, bf16 checkpoints,
// and the one-line errors for bad folders.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "accelerate/memory/empty_weights.h"
#include "accelerate/models/llama.h"
#include "accelerate/models/pretrained.h"
#include "support/autograd_graph.h"
#include "support/error_message.h"
#include "support/temp_dir.h"

namespace am = accelerate::models;
using accelerate::testing::error_of;
using accelerate::testing::TempDir;

namespace {

am::LlamaConfig tiny_llama_config(bool tied = false) {
  am::LlamaConfig config;
  config.vocab_size = 40;
  config.hidden_size = 32;
  config.intermediate_size = 48;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.max_position_embeddings = 64;
  config.tie_word_embeddings = tied;
  return config;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string llama_json(const std::string& rope) {
  return R"({"model_type": "llama", "vocab_size": 128, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
    "bos_token_id": 1, "max_position_embeddings": 256, )" +
         rope + "}";
}

at::Tensor tiny_ids() { return at::arange(14, at::kLong).remainder(40).reshape({2, 7}); }

}  // namespace

TEST(LlamaConfig, ReadsLlama3RopeInBothTransformersSpellings) {
  TempDir dir;
  // transformers 5 writes rope_parameters; published Llama 3.1 folders
  // (transformers 4) have rope_theta plus rope_scaling, some with "type".
  const std::string v5 = R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
      "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192})";
  const std::string v4 = R"("rope_theta": 500000.0, "rope_scaling": {"type": "llama3",
      "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192})";
  for (const auto& rope : {v5, v4}) {
    write_text_file(dir.file("config.json"), llama_json(rope));
    const am::LlamaConfig config = am::read_llama_config(dir.path());
    EXPECT_EQ(config.rope_scaling.type, am::RopeType::kLlama3);
    EXPECT_DOUBLE_EQ(config.rope_theta, 500000.0);
    EXPECT_DOUBLE_EQ(config.rope_scaling.factor, 32.0);
    EXPECT_EQ(config.rope_scaling.original_max_position_embeddings, 8192);
    EXPECT_EQ(config.kv_heads(), 2);
    EXPECT_EQ(config.head_width(), 16);
    EXPECT_TRUE(config.tie_word_embeddings);
    EXPECT_EQ(config.other_keys.at("bos_token_id"), "1");
  }
}

TEST(LlamaConfig, WritesWhatItReads) {
  TempDir dir;
  am::LlamaConfig config = tiny_llama_config(true);
  config.rope_scaling.type = am::RopeType::kLlama3;
  config.rope_scaling.original_max_position_embeddings = 32;
  config.rope_theta = 5e5;
  config.attention_bias = true;
  config.other_keys["eos_token_id"] = "[2, 3]";
  am::write_llama_config(config, dir.path(), "bfloat16");
  const am::LlamaConfig back = am::read_llama_config(dir.file("config.json"));
  EXPECT_EQ(am::llama_config_json(back), am::llama_config_json(config, "bfloat16"));
  EXPECT_EQ(back.other_keys.at("eos_token_id"), "[2,3]");
  EXPECT_EQ(back.other_keys.at("torch_dtype"), "\"bfloat16\"");
}

TEST(LlamaConfig, RefusesWhatItCannotRunInOneLine) {
  TempDir dir;
  const std::string path = dir.file("config.json");
  write_text_file(path, llama_json(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})"));
  EXPECT_EQ(error_of([&] { am::read_llama_config(path); }),
            "Llama config '" + path +
                "': rope type \"yarn\" is not supported (supported: default, llama3)");
  write_text_file(path, R"({"model_type": "gpt2", "vocab_size": 5})");
  EXPECT_EQ(error_of([&] { am::read_llama_config(path); }),
            "Llama config '" + path + "': model_type \"gpt2\" is not one of llama, mistral, qwen2");
  write_text_file(path, R"({"vocab_size": 5, "hidden_size": 8, "intermediate_size": 8,
    "num_attention_heads": 2})");
  EXPECT_EQ(error_of([&] { am::read_llama_config(path); }),
            "Llama config '" + path + "': \"num_hidden_layers\" is missing");
  write_text_file(path, llama_json(R"("head_dim": 15)"));
  EXPECT_EQ(error_of([&] { am::read_llama_config(path); }),
            "Llama config: head_dim must be positive and even, not 15 (in '" + path + "')");
}

TEST(LlamaModel, ParameterNamesAreTransformers) {
  am::LlamaConfig config = tiny_llama_config();
  config.num_hidden_layers = 1;
  am::LlamaForCausalLM model(config);
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) names.push_back(item.key());
  const std::vector<std::string> expected = {"model.embed_tokens.weight",
                                             "model.layers.0.self_attn.q_proj.weight",
                                             "model.layers.0.self_attn.k_proj.weight",
                                             "model.layers.0.self_attn.v_proj.weight",
                                             "model.layers.0.self_attn.o_proj.weight",
                                             "model.layers.0.mlp.gate_proj.weight",
                                             "model.layers.0.mlp.up_proj.weight",
                                             "model.layers.0.mlp.down_proj.weight",
                                             "model.layers.0.input_layernorm.weight",
                                             "model.layers.0.post_attention_layernorm.weight",
                                             "model.norm.weight",
                                             "lm_head.weight"};
  EXPECT_EQ(names, expected);
  // Grouped-query attention: k and v have kv_heads * head_dim rows.
  EXPECT_EQ(
      model->model->layers->at<am::LlamaDecoderLayerImpl>(0).self_attn->k_proj->weight.sizes(),
      (std::vector<int64_t>{16, 32}));
  config.tie_word_embeddings = true;
  am::LlamaForCausalLM tied(config);
  EXPECT_EQ(tied->named_parameters().size(), expected.size() - 1);
  EXPECT_FALSE(tied->named_parameters().contains("lm_head.weight"));
}

TEST(LlamaModel, Llama3RopeKeepsHighSlowsLowAndBlendsBetween) {
  am::LlamaConfig config = tiny_llama_config();
  config.hidden_size = 64;  // head_dim 16: 8 frequencies
  config.rope_theta = 5e5;
  const at::Tensor plain = am::rope_inverse_frequencies(config);
  config.rope_scaling.type = am::RopeType::kLlama3;
  config.rope_scaling.original_max_position_embeddings = 64;  // bands at wavelengths 16 and 64
  const at::Tensor scaled = am::rope_inverse_frequencies(config);
  ASSERT_EQ(plain.numel(), 8);
  const at::Tensor wavelength = 2 * M_PI / plain;
  int kept = 0, slowed = 0, blended = 0;
  for (int64_t i = 0; i < 8; ++i) {
    const double w = wavelength[i].item<double>(), p = plain[i].item<double>(),
                 s = scaled[i].item<double>();
    if (w < 16) {
      EXPECT_EQ(s, p) << i;
      ++kept;
    } else if (w > 64) {
      EXPECT_NEAR(s, p / 8, 1e-6 * p) << i;
      ++slowed;
    } else {
      // smooth = (64 / w - 1) / 3; s = (1 - smooth) p / 8 + smooth p.
      const double smooth = (64 / w - 1) / 3;
      EXPECT_NEAR(s, (1 - smooth) * p / 8 + smooth * p, 1e-6 * p) << i;
      EXPECT_TRUE(s > p / 8 && s < p) << i;
      ++blended;
    }
  }
  EXPECT_EQ(kept, 1);
  EXPECT_EQ(blended, 1);
  EXPECT_EQ(slowed, 6);
}

// As on a ZeRO-3 process that receives its weights (zero3_init): built
// inside the empty-weights guard, where nothing is computed, it must still
// run once its parameters are filled (the rotary frequencies are not one).
TEST(LlamaModel, BuiltWithoutWeightsRunsOnceTheyAreFilled) {
  torch::manual_seed(3);
  am::LlamaForCausalLM built(tiny_llama_config());
  am::LlamaForCausalLM empty{nullptr};
  {
    auto guard = accelerate::init_empty_weights();
    empty = am::LlamaForCausalLM(tiny_llama_config());
  }
  at::NoGradGuard no_grad;
  const auto weights = built->named_parameters();
  for (auto& entry : empty->named_parameters()) entry.value().copy_(weights[entry.key()]);
  EXPECT_TRUE(at::equal(empty->forward(tiny_ids()), built->forward(tiny_ids())));
}

namespace {
// The share of `tensor`'s memory pages that are resident (mincore).
double resident_page_share(const at::Tensor& tensor) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(tensor.data_ptr()) / page * page;
  const auto end = reinterpret_cast<std::uintptr_t>(tensor.data_ptr()) + tensor.nbytes();
  std::vector<unsigned char> pages((end - begin + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(begin), end - begin, pages.data()) != 0) return -1;
  std::size_t resident = 0;
  for (unsigned char flags : pages) resident += flags & 1;
  return static_cast<double>(resident) / static_cast<double>(pages.size());
}
// transformers' gradient_checkpointing_enable(): bitwise the plain run's
// gradients, each layer one checkpoint node in the graph, none when off.
TEST(LlamaModel, GradientCheckpointingGivesTheSameGradients) {
  torch::manual_seed(31);
  am::LlamaForCausalLM model(tiny_llama_config());
  auto gradients = [&] {
    model->zero_grad();
    model->loss(tiny_ids(), tiny_ids()).backward();
    std::vector<at::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto plain = gradients();
  EXPECT_FALSE(model->model->gradient_checkpointing());
  model->model->set_gradient_checkpointing(true);
  const auto checkpointed = gradients();
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(at::equal(plain[i], checkpointed[i])) << i;
  const auto checkpoints = [&] {
    return accelerate::testing::graph_nodes(model->model->forward(tiny_ids()), "Checkpoint");
  };
  EXPECT_EQ(checkpoints(), tiny_llama_config().num_hidden_layers);
  {
    at::NoGradGuard no_grad;  // evaluation: the layers just run
    EXPECT_FALSE(model->model->forward(tiny_ids()).requires_grad());
  }
  model->model->set_gradient_checkpointing(false);
  EXPECT_EQ(checkpoints(), 0);
}

}  // namespace

// Loading a folder inside the guard (from_pretrained under zero3_init on a
// receiving process) checks the files but reads no data into the weights:
// their pages stay unbacked. 64 MB: above glibc's mmap threshold, so the
// weight has fresh pages of its own.
TEST(PretrainedWeights, LoadingInsideTheEmptyWeightsGuardReadsNoData) {
  TempDir dir;
  torch::nn::Linear saved(4096, 4096);
  am::save_pretrained_weights(*saved, dir.path());
  torch::nn::Linear empty{nullptr};
  {
    auto guard = accelerate::init_empty_weights();
    empty = torch::nn::Linear(4096, 4096);
    am::load_pretrained_weights(*empty, dir.path());
    // The names and shapes are still checked there.
    torch::nn::Linear wider(4096, 4097);
    EXPECT_THROW(am::load_pretrained_weights(*wider, dir.path()), accelerate::Error);
  }
  EXPECT_LT(resident_page_share(empty->weight), 0.01) << "the load wrote the weight";
  am::load_pretrained_weights(*empty, dir.path());  // after the guard: a real load
  EXPECT_GT(resident_page_share(empty->weight), 0.99) << "the check cannot tell (mincore)";
  EXPECT_TRUE(at::equal(empty->weight, saved->weight));
}

TEST(LlamaModel, SavesAndLoadsItsOwnFoldersOneFileAndSharded) {
  for (const bool tied : {false, true}) {
    torch::manual_seed(3);
    am::LlamaForCausalLM model(tiny_llama_config(tied));
    const at::Tensor logits = model->forward(tiny_ids());
    for (const char* shard : {"5GB", "10KB"}) {
      TempDir dir;
      const auto files = model->save_pretrained(dir.path(), shard);
      EXPECT_EQ(files.size() > 1, std::string(shard) == "10KB");
      EXPECT_TRUE(std::filesystem::exists(dir.file("config.json")));
      auto back = am::LlamaForCausalLMImpl::from_pretrained(dir.path());
      EXPECT_TRUE(at::equal(back->forward(tiny_ids()), logits)) << tied << " " << shard;
    }
  }
}

TEST(LlamaModel, Bf16CheckpointLoadsIntoFp32OrBf16) {
  torch::manual_seed(4);
  am::LlamaForCausalLM model(tiny_llama_config());
  model->to(at::kBFloat16);
  TempDir dir;
  model->save_pretrained(dir.path());
  EXPECT_EQ(am::read_llama_config(dir.path()).other_keys.at("torch_dtype"), "\"bfloat16\"");
  auto fp32 = am::LlamaForCausalLMImpl::from_pretrained(dir.path());
  auto bf16 = am::LlamaForCausalLMImpl::from_pretrained(
      dir.path(), am::LlamaLoadOptions().dtype(at::kBFloat16));
  const auto saved = model->named_parameters();
  for (const auto& item : fp32->named_parameters()) {
    EXPECT_EQ(item.value().scalar_type(), at::kFloat) << item.key();
    EXPECT_TRUE(at::equal(item.value(), saved[item.key()].to(at::kFloat))) << item.key();
    const at::Tensor& same = bf16->named_parameters()[item.key()];
    EXPECT_EQ(same.scalar_type(), at::kBFloat16) << item.key();
    EXPECT_TRUE(at::equal(same, saved[item.key()])) << item.key();
  }
}

// Every weight comes from the folder, so drawing LibTorch's default
// initialisation first would be wasted work (most of the load time of a
// large model): from_pretrained builds without it and draws no random
// numbers, as transformers' from_pretrained does not.
TEST(LlamaModel, FromPretrainedDrawsNoInitialisationTheFolderOverwrites) {
  torch::manual_seed(6);
  am::LlamaForCausalLM model(tiny_llama_config());
  TempDir dir;
  model->save_pretrained(dir.path());
  torch::manual_seed(7);
  const at::Tensor expected = at::rand({8});
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    torch::manual_seed(7);
    auto back =
        am::LlamaForCausalLMImpl::from_pretrained(dir.path(), am::LlamaLoadOptions().dtype(dtype));
    EXPECT_TRUE(at::equal(at::rand({8}), expected)) << "the generator moved: " << dtype;
    const auto saved = model->named_parameters();
    for (const auto& item : back->named_parameters()) {
      EXPECT_TRUE(at::equal(item.value(), saved[item.key()].to(dtype))) << item.key();
    }
  }
}

// Rewrites dir/model.safetensors through `edit`.
void edit_llama_weights(const std::string& dir,
                        const std::function<void(accelerate::NamedTensors&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  auto tensors = accelerate::load_safetensors(path);
  edit(tensors);
  accelerate::save_safetensors(path, tensors, {{"format", "pt"}});
}

TEST(LlamaModel, BadFoldersGiveOneLineErrorsAndLeaveTheModelAlone) {
  torch::manual_seed(5);
  am::LlamaForCausalLM source(tiny_llama_config());
  TempDir dir;
  source->save_pretrained(dir.path());
  const std::string file = dir.file("model.safetensors");
  am::LlamaForCausalLM target(tiny_llama_config());
  const at::Tensor before = target->model->norm->weight.clone();
  auto load = [&] { am::load_pretrained_weights(*target, dir.path()); };

  edit_llama_weights(dir.path(), [](accelerate::NamedTensors& tensors) {
    for (auto& [name, tensor] : tensors) {
      if (name == "model.layers.1.self_attn.k_proj.weight") tensor = at::zeros({16, 31});
    }
  });
  EXPECT_EQ(error_of(load),
            "load_pretrained_weights: tensor 'model.layers.1.self_attn.k_proj.weight' in '" + file +
                "' has shape [16, 31] but the model's is [16, 32]");
  EXPECT_TRUE(at::equal(target->model->norm->weight, before));

  edit_llama_weights(dir.path(), [](accelerate::NamedTensors& tensors) {
    for (auto& [name, tensor] : tensors) {
      if (name == "model.layers.1.self_attn.k_proj.weight") tensor = at::zeros({16, 32});
    }
    tensors.emplace_back("model.layers.2.mlp.up_proj.weight", at::zeros({2}));
  });
  EXPECT_EQ(error_of(load),
            "load_pretrained_weights: unexpected tensor 'model.layers.2.mlp.up_proj.weight' in '" +
                file + "': the model has no such parameter");
  EXPECT_TRUE(at::equal(target->model->norm->weight, before));

  edit_llama_weights(dir.path(), [](accelerate::NamedTensors& tensors) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [](const auto& item) {
                                   return item.first == "model.layers.2.mlp.up_proj.weight" ||
                                          item.first == "model.norm.weight";
                                 }),
                  tensors.end());
  });
  EXPECT_EQ(error_of(load),
            "load_pretrained_weights: missing tensor 'model.norm.weight': no weight file in '" +
                dir.path() + "' holds it");
  EXPECT_TRUE(at::equal(target->model->norm->weight, before));

  std::filesystem::remove(file);
  EXPECT_EQ(error_of(load),
            "load_pretrained_weights: no model.safetensors or model.safetensors.index.json in '" +
                dir.path() + "'");
}
