// read_gpt2_config / write_gpt2_config (include/accelerate/models/gpt2_config.h).
// Key names and defaults follow transformers' GPT2Config; a key that is
// absent takes transformers' default, as GPT2Config(**file) does.
#include "accelerate/models/gpt2_config.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"
#include "models/config_json.h"

namespace accelerate::models {
namespace {

using nlohmann::json;

constexpr detail::EnumName<GPT2Activation> kGpt2ActivationNames[] = {
    {GPT2Activation::kGeluNew, "gelu_new", {}},
    {GPT2Activation::kGeluPytorchTanh, "gelu_pytorch_tanh", {}},
    {GPT2Activation::kGeluFast, "gelu_fast", {}},
    {GPT2Activation::kGelu, "gelu", {}},
    {GPT2Activation::kRelu, "relu", {}},
    {GPT2Activation::kSilu, "silu", {"swish"}},
    {GPT2Activation::kQuickGelu, "quick_gelu", {}},
};
static_assert(detail::names_are_distinct(kGpt2ActivationNames));

// The keys read_gpt2_config turns into fields (or checks); the rest go to
// other_keys.
const std::set<std::string> kGpt2Keys = {"vocab_size",
                                         "n_positions",
                                         "n_embd",
                                         "n_layer",
                                         "n_head",
                                         "n_inner",
                                         "activation_function",
                                         "resid_pdrop",
                                         "embd_pdrop",
                                         "attn_pdrop",
                                         "layer_norm_epsilon",
                                         "initializer_range",
                                         "scale_attn_weights",
                                         "scale_attn_by_inverse_layer_idx",
                                         "reorder_and_upcast_attn",
                                         "add_cross_attention",
                                         "tie_word_embeddings",
                                         "model_type",
                                         "architectures",
                                         "torch_dtype",
                                         "dtype",
                                         "transformers_version"};

}  // namespace

const char* to_string(GPT2Activation activation) {
  return detail::enum_name(kGpt2ActivationNames, activation, "?");
}

double GPT2Config::attention_scaling(int64_t layer) const {
  double scaling = scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(head_dim())) : 1.0;
  if (scale_attn_by_inverse_layer_idx) scaling /= static_cast<double>(layer + 1);
  return scaling;
}

void GPT2Config::validate() const {
  auto positive = [](int64_t value, const char* name) {
    require_positive("GPT-2 config", value, name);
  };
  positive(vocab_size, "vocab_size");
  positive(n_positions, "n_positions");
  positive(n_embd, "n_embd");
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  if (n_inner < 0) {
    throw ConfigError("GPT-2 config: n_inner must be positive or null, not " +
                      std::to_string(n_inner));
  }
  if (n_embd % n_head != 0) {
    throw ConfigError("GPT-2 config: n_embd " + std::to_string(n_embd) +
                      " is not a multiple of n_head " + std::to_string(n_head));
  }
  if (!(layer_norm_epsilon > 0)) {
    throw ConfigError("GPT-2 config: layer_norm_epsilon must be positive");
  }
  if (!(initializer_range >= 0)) {
    throw ConfigError("GPT-2 config: initializer_range must not be negative");
  }
  for (const auto& [name, p] : {std::pair<const char*, double>{"resid_pdrop", resid_pdrop},
                                {"embd_pdrop", embd_pdrop},
                                {"attn_pdrop", attn_pdrop}}) {
    if (!(p >= 0 && p < 1)) {
      throw ConfigError(std::string("GPT-2 config: ") + name + " must be in [0, 1), not " +
                        std::to_string(p));
    }
  }
}

GPT2Config read_gpt2_config(const std::string& path_or_folder) {
  const ConfigJson reader("GPT-2 config", path_or_folder);
  const std::string model_type = reader.text("model_type", "gpt2");
  if (model_type != "gpt2") reader.fail("model_type \"" + model_type + "\" is not \"gpt2\"");
  // transformers' upcast attention and cross-attention blocks are not built
  // here: refused rather than silently computed another way.
  for (const char* key : {"reorder_and_upcast_attn", "add_cross_attention"}) {
    if (reader.boolean(key, false)) {
      reader.fail(std::string("\"") + key + "\": true is not supported (only false)");
    }
  }
  GPT2Config config;
  const std::string act = reader.text("activation_function", "gelu_new");
  const auto activation = detail::parse_enum(kGpt2ActivationNames, act, detail::NameCase::kExact);
  if (!activation) {
    reader.fail("activation_function \"" + act + "\" is not supported (" +
                detail::joined_names(kGpt2ActivationNames) + ")");
  }
  config.activation_function = *activation;
  config.vocab_size = reader.integer("vocab_size", config.vocab_size);
  config.n_positions = reader.integer("n_positions", config.n_positions);
  config.n_embd = reader.integer("n_embd", config.n_embd);
  config.n_layer = reader.integer("n_layer", config.n_layer);
  config.n_head = reader.integer("n_head", config.n_head);
  config.n_inner = reader.integer("n_inner", 0);
  if (reader.find("n_inner") && config.n_inner <= 0) {
    reader.fail("\"n_inner\" must be positive or null, not " + std::to_string(config.n_inner));
  }
  config.resid_pdrop = reader.number("resid_pdrop", config.resid_pdrop);
  config.embd_pdrop = reader.number("embd_pdrop", config.embd_pdrop);
  config.attn_pdrop = reader.number("attn_pdrop", config.attn_pdrop);
  config.layer_norm_epsilon = reader.number("layer_norm_epsilon", config.layer_norm_epsilon);
  config.initializer_range = reader.number("initializer_range", config.initializer_range);
  config.scale_attn_weights = reader.boolean("scale_attn_weights", true);
  config.scale_attn_by_inverse_layer_idx = reader.boolean("scale_attn_by_inverse_layer_idx", false);
  config.tie_word_embeddings = reader.boolean("tie_word_embeddings", true);
  config.other_keys = reader.other_keys(kGpt2Keys);
  validate_from(config, reader.path());
  return config;
}

std::string gpt2_config_json(const GPT2Config& config, const std::string& architecture,
                             const std::string& dtype) {
  json out = config_json_start(config.other_keys, "gpt2", architecture, dtype);
  out["vocab_size"] = config.vocab_size;
  out["n_positions"] = config.n_positions;
  out["n_embd"] = config.n_embd;
  out["n_layer"] = config.n_layer;
  out["n_head"] = config.n_head;
  out["n_inner"] = config.n_inner > 0 ? json(config.n_inner) : json(nullptr);
  out["activation_function"] = to_string(config.activation_function);
  out["resid_pdrop"] = config.resid_pdrop;
  out["embd_pdrop"] = config.embd_pdrop;
  out["attn_pdrop"] = config.attn_pdrop;
  out["layer_norm_epsilon"] = config.layer_norm_epsilon;
  out["initializer_range"] = config.initializer_range;
  out["scale_attn_weights"] = config.scale_attn_weights;
  out["scale_attn_by_inverse_layer_idx"] = config.scale_attn_by_inverse_layer_idx;
  out["reorder_and_upcast_attn"] = false;
  out["tie_word_embeddings"] = config.tie_word_embeddings;
  return out.dump(2) + "\n";
}

void write_gpt2_config(const GPT2Config& config, const std::string& directory,
                       const std::string& architecture, const std::string& dtype) {
  config.validate();
  write_config_file(directory, gpt2_config_json(config, architecture, dtype), "write_gpt2_config");
}

}  // namespace accelerate::models
