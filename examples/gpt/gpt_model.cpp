#include "gpt_model.h"

#include <accelerate/activation_checkpointing.h>
#include <accelerate/activations.h>
#include <accelerate/attention.h>
#include <accelerate/cross_entropy.h>
#include <accelerate/errors.h>
#include <accelerate/safetensors.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace gpt {
namespace {

// GPT-2 stores these projections as Conv1D, whose weight is [in, out].
bool is_conv1d_weight(const std::string& name) {
  for (const char* suffix : {"c_attn.weight", "c_proj.weight", "c_fc.weight"}) {
    const std::string s = suffix;
    if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      return true;
    }
  }
  return false;
}

void init_linear(const torch::nn::Linear& linear, double std) {
  torch::nn::init::normal_(linear->weight, 0.0, std);
  if (linear->bias.defined()) torch::nn::init::zeros_(linear->bias);
}

// The number after "key": in the flat JSON object config.json holds.
double json_number(const std::string& text, const std::string& key, const std::string& path) {
  const std::string quoted = "\"" + key + "\"";
  const auto at = text.find(quoted);
  const auto colon = at == std::string::npos ? at : text.find(':', at + quoted.size());
  if (colon == std::string::npos) {
    throw accelerate::Error(path + ": config.json has no number \"" + key + "\"");
  }
  std::istringstream in(text.substr(colon + 1));
  double value = 0;
  if (!(in >> value)) throw accelerate::Error(path + ": \"" + key + "\" is not a number");
  return value;
}

}  // namespace

GptConfig GptConfig::preset(const std::string& name, int64_t vocab_size) {
  GptConfig config;
  config.vocab_size = vocab_size;
  if (name == "tiny") {
    config.n_positions = 128, config.n_embd = 128, config.n_layer = 4, config.n_head = 4;
  } else if (name == "small") {
    config.n_positions = 256, config.n_embd = 384, config.n_layer = 6, config.n_head = 6;
  } else {
    throw std::invalid_argument("unknown GPT preset '" + name + "' (tiny, small)");
  }
  return config;
}

void GptConfig::validate() const {
  const auto require = [](bool ok, const std::string& problem) {
    if (!ok) throw std::invalid_argument("GptConfig: " + problem);
  };
  require(vocab_size > 0 && n_positions > 0 && n_embd > 0 && n_layer > 0 && n_head > 0,
          "vocab_size, n_positions, n_embd, n_layer and n_head must be positive");
  require(n_embd % n_head == 0, "n_embd " + std::to_string(n_embd) +
                                    " is not a multiple of n_head " + std::to_string(n_head));
  require(dropout >= 0 && dropout < 1, "dropout must be in [0, 1)");
}

AttentionImpl::AttentionImpl(const GptConfig& config_)
    : config(config_),
      c_attn(register_module("c_attn", torch::nn::Linear(config.n_embd, 3 * config.n_embd))),
      c_proj(register_module("c_proj", torch::nn::Linear(config.n_embd, config.n_embd))),
      resid_dropout(register_module("resid_dropout", torch::nn::Dropout(config.dropout))) {}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0), tokens = x.size(1), width = x.size(2);
  const int64_t heads = config.n_head, head_dim = width / heads;
  // [batch, tokens, 3 * width] -> three [batch, heads, tokens, head_dim]
  auto qkv = c_attn(x).view({batch, tokens, 3, heads, head_dim}).permute({2, 0, 3, 1, 4});
  auto y = accelerate::ulysses_attention(
      qkv[0], qkv[1], qkv[2], sequence_parallel,
      accelerate::AttentionOptions().dropout_p(is_training() ? config.dropout : 0.0));
  y = y.transpose(1, 2).contiguous().view({batch, tokens, width});
  return resid_dropout(c_proj(y));
}

MlpImpl::MlpImpl(const GptConfig& config)
    : c_fc(register_module("c_fc", torch::nn::Linear(config.n_embd, 4 * config.n_embd))),
      c_proj(register_module("c_proj", torch::nn::Linear(4 * config.n_embd, config.n_embd))),
      dropout(register_module("dropout", torch::nn::Dropout(config.dropout))) {}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  // GPT-2's "gelu_new", on the library's fused CPU kernel
  return dropout(c_proj(accelerate::gelu(c_fc(x), accelerate::GeluApproximation::kTanh)));
}

BlockImpl::BlockImpl(const GptConfig& config) {
  const auto norm = [&] {
    return torch::nn::LayerNorm(
        torch::nn::LayerNormOptions({config.n_embd}).eps(config.layer_norm_epsilon));
  };
  ln_1 = register_module("ln_1", norm());
  attn = register_module("attn", Attention(config));
  ln_2 = register_module("ln_2", norm());
  mlp = register_module("mlp", Mlp(config));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  const auto h = x + attn(ln_1(x));
  return h + mlp(ln_2(h));
}

GptImpl::GptImpl(const GptConfig& config_) : config(config_) {
  config.validate();
  wte = register_module("wte", torch::nn::Embedding(config.vocab_size, config.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(config.n_positions, config.n_embd));
  drop = register_module("drop", torch::nn::Dropout(config.dropout));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layer; ++i) {
    blocks.push_back(Block(config));
    h->push_back(blocks.back());
  }
  ln_f = register_module(
      "ln_f", torch::nn::LayerNorm(
                  torch::nn::LayerNormOptions({config.n_embd}).eps(config.layer_norm_epsilon)));
  // GPT-2's initialisation: N(0, 0.02), and the projections that add into
  // the residual stream scaled down by sqrt(2 * layers).
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(wte->weight, 0.0, 0.02);
  torch::nn::init::normal_(wpe->weight, 0.0, 0.02);
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  for (auto& block : blocks) {
    init_linear(block->attn->c_attn, 0.02);
    init_linear(block->attn->c_proj, residual_std);
    init_linear(block->mlp->c_fc, 0.02);
    init_linear(block->mlp->c_proj, residual_std);
  }
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens, int64_t first_position) {
  const int64_t length = first_position + tokens.size(1);
  if (length > config.n_positions) {
    throw accelerate::Error("GPT: " + std::to_string(length) + " tokens exceed n_positions " +
                            std::to_string(config.n_positions));
  }
  const auto positions =
      torch::arange(first_position, length, tokens.options().dtype(torch::kLong));
  auto x = drop(wte(tokens) + wpe(positions));
  const bool recompute = config.gradient_checkpointing && is_training();
  // Both calls mark the block as a unit for ZeRO stage 3 (its weights are
  // gathered only while it runs); otherwise they are block->forward(x).
  for (auto& block : blocks) {
    x = recompute ? accelerate::checkpoint_activations(block, x)
                  : accelerate::unit_forward(block, x);
  }
  return torch::matmul(ln_f(x), wte->weight.t());  // the head is the token embedding
}

torch::Tensor GptImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  if (!sequence_parallel.enabled()) {
    const auto logits = forward(tokens);
    // In float, on the library's fused kernel (no float copy of the logits).
    return accelerate::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
  }
  // The targets are the next tokens already (the windows are shifted before
  // any split), so each rank takes the same columns of both.
  const auto mine = accelerate::slice_tokens(tokens, sequence_parallel);
  const auto my_targets = accelerate::slice_tokens(targets, sequence_parallel);
  const auto logits = forward(mine, sequence_parallel.rank() * mine.size(1));
  const auto sum = accelerate::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), my_targets.reshape({-1}),
      accelerate::CrossEntropyOptions().reduction(accelerate::LossReduction::kSum));
  return accelerate::sequence_parallel_loss(sum, torch::tensor(my_targets.numel(), torch::kLong),
                                            sequence_parallel);
}

void GptImpl::use_sequence_parallel(const accelerate::SequenceParallel& sp) {
  if (config.n_head % sp.size() != 0) {
    throw accelerate::Error("GPT: n_head " + std::to_string(config.n_head) +
                            " is not divisible by sp_size " + std::to_string(sp.size()));
  }
  sequence_parallel = sp;
  for (auto& block : blocks) block->attn->sequence_parallel = sp;
}

int64_t parameter_count(const Gpt& model) {
  int64_t count = 0;
  for (const auto& p : model->parameters()) count += p.numel();
  return count;
}

accelerate::NamedTensors hf_state_dict(const accelerate::NamedTensors& weights) {
  accelerate::NamedTensors state;
  for (const auto& [name, value] : weights) {
    torch::Tensor tensor = value.detach();
    if (is_conv1d_weight(name)) tensor = tensor.t().contiguous();
    state.emplace_back("transformer." + name, tensor);
  }
  return state;
}

namespace {
accelerate::NamedTensors named_weights(const Gpt& model) {
  accelerate::NamedTensors weights;
  for (const auto& item : model->named_parameters()) weights.emplace_back(item.key(), item.value());
  return weights;
}
}  // namespace

accelerate::NamedTensors hf_state_dict(const Gpt& model) {
  return hf_state_dict(named_weights(model));
}

std::string hf_config_json(const GptConfig& c) {
  std::ostringstream out;
  out.precision(17);
  out << "{\n"
      << "  \"activation_function\": \"gelu_new\",\n"
      << "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
      << "  \"attn_pdrop\": " << c.dropout << ",\n"
      << "  \"embd_pdrop\": " << c.dropout << ",\n"
      << "  \"initializer_range\": 0.02,\n"
      << "  \"layer_norm_epsilon\": " << c.layer_norm_epsilon << ",\n"
      << "  \"model_type\": \"gpt2\",\n"
      << "  \"n_embd\": " << c.n_embd << ",\n"
      << "  \"n_head\": " << c.n_head << ",\n"
      << "  \"n_inner\": null,\n"
      << "  \"n_layer\": " << c.n_layer << ",\n"
      << "  \"n_positions\": " << c.n_positions << ",\n"
      << "  \"resid_pdrop\": " << c.dropout << ",\n"
      << "  \"tie_word_embeddings\": true,\n"
      << "  \"vocab_size\": " << c.vocab_size << "\n"
      << "}\n";
  return out.str();
}

void save_pretrained(const Gpt& model, const std::string& directory,
                     const accelerate::NamedTensors& weights) {
  std::filesystem::create_directories(directory);
  accelerate::save_safetensors(directory + "/model.safetensors", hf_state_dict(weights),
                               {{"format", "pt"}});
  std::ofstream(directory + "/config.json") << hf_config_json(model->config);
}

void save_pretrained(const Gpt& model, const std::string& directory) {
  save_pretrained(model, directory, named_weights(model));
}

Gpt load_pretrained(const std::string& directory) {
  std::ifstream in(directory + "/config.json");
  if (!in) throw accelerate::Error(directory + ": no config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  GptConfig config;
  const auto integer = [&](const char* key) {
    return static_cast<int64_t>(json_number(text, key, directory));
  };
  config.vocab_size = integer("vocab_size");
  config.n_positions = integer("n_positions");
  config.n_embd = integer("n_embd");
  config.n_layer = integer("n_layer");
  config.n_head = integer("n_head");
  config.layer_norm_epsilon = json_number(text, "layer_norm_epsilon", directory);
  Gpt model(config);
  std::map<std::string, torch::Tensor> stored;
  for (auto& [name, tensor] : accelerate::load_safetensors(directory + "/model.safetensors")) {
    stored[name] = tensor;
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, expected] : hf_state_dict(model)) {
    auto it = stored.find(name);
    if (it == stored.end())
      throw accelerate::Error(directory + ": model.safetensors lacks " + name);
    if (!it->second.sizes().equals(expected.sizes())) {
      throw accelerate::Error(directory + ": " + name + " has the wrong shape");
    }
    torch::Tensor value = it->second;
    const std::string own = name.substr(std::string("transformer.").size());
    if (is_conv1d_weight(own)) value = value.t();
    model->named_parameters()[own].copy_(value);
  }
  return model;
}

}  // namespace gpt
