// read_bert_config / write_bert_config (include/accelerate/models/bert_config.h).
// Key names and defaults follow transformers' BertConfig; num_labels comes
// from id2label when the file has one (transformers writes id2label, not
// num_labels), else from "num_labels", else 2.
#include "accelerate/models/bert_config.h"

#include <set>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"
#include "models/config_json.h"

namespace accelerate::models {
namespace {

using nlohmann::json;

constexpr detail::EnumName<BertActivation> kActivationNames[] = {
    {BertActivation::kGelu, "gelu", {}},
    {BertActivation::kGeluTanh, "gelu_new", {"gelu_pytorch_tanh"}},
    {BertActivation::kRelu, "relu", {}},
};
static_assert(detail::names_are_distinct(kActivationNames));

constexpr detail::EnumName<ProblemType> kProblemTypeNames[] = {
    {ProblemType::kRegression, "regression", {}},
    {ProblemType::kSingleLabelClassification, "single_label_classification", {}},
    {ProblemType::kMultiLabelClassification, "multi_label_classification", {}},
};
static_assert(detail::names_are_distinct(kProblemTypeNames));

// The keys read_bert_config turns into fields; the rest go to other_keys.
const std::set<std::string> kBertKeys = {"vocab_size",
                                         "hidden_size",
                                         "num_hidden_layers",
                                         "num_attention_heads",
                                         "intermediate_size",
                                         "hidden_act",
                                         "hidden_dropout_prob",
                                         "attention_probs_dropout_prob",
                                         "max_position_embeddings",
                                         "type_vocab_size",
                                         "layer_norm_eps",
                                         "pad_token_id",
                                         "classifier_dropout",
                                         "id2label",
                                         "label2id",
                                         "num_labels",
                                         "problem_type",
                                         "position_embedding_type",
                                         "model_type",
                                         "architectures",
                                         "torch_dtype",
                                         "dtype",
                                         "transformers_version"};

// {"0": "NEGATIVE", "1": "POSITIVE"}: keys must be 0..n-1.
std::vector<std::string> read_labels(const ConfigJson& reader) {
  const json* map = reader.find("id2label");
  if (!map) {
    const int64_t n = reader.integer("num_labels", 2);
    if (n <= 0) reader.fail("\"num_labels\" must be positive, not " + std::to_string(n));
    BertConfig defaults;
    defaults.set_num_labels(n);
    return defaults.id2label;
  }
  if (!map->is_object() || map->empty()) reader.fail("\"id2label\" must be a non-empty object");
  std::vector<std::string> names(map->size());
  std::vector<bool> seen(map->size(), false);
  for (const auto& [key, name] : map->items()) {
    size_t used = 0;
    long index = -1;
    try {
      index = std::stol(key, &used);
    } catch (const std::exception&) {
    }
    if (used != key.size() || index < 0 || static_cast<size_t>(index) >= names.size() ||
        seen[index] || !name.is_string()) {
      reader.fail("\"id2label\" must map \"0\" ... \"" + std::to_string(names.size() - 1) +
                  "\" to names, not \"" + key + "\"");
    }
    seen[index] = true;
    names[index] = name.get<std::string>();
  }
  return names;
}

}  // namespace

const char* to_string(BertActivation activation) {
  return detail::enum_name(kActivationNames, activation, "?");
}
const char* to_string(ProblemType type) { return detail::enum_name(kProblemTypeNames, type, "?"); }

void BertConfig::set_num_labels(int64_t n) {
  if (n <= 0)
    throw ConfigError("BERT config: num_labels must be positive, not " + std::to_string(n));
  id2label.clear();
  for (int64_t i = 0; i < n; ++i) id2label.push_back("LABEL_" + std::to_string(i));
}

void BertConfig::validate() const {
  auto positive = [](int64_t value, const char* name) {
    require_positive("BERT config", value, name);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(intermediate_size, "intermediate_size");
  positive(max_position_embeddings, "max_position_embeddings");
  positive(type_vocab_size, "type_vocab_size");
  positive(num_labels(), "num_labels");
  if (hidden_size % num_attention_heads != 0) {
    throw ConfigError("BERT config: hidden_size " + std::to_string(hidden_size) +
                      " is not a multiple of num_attention_heads " +
                      std::to_string(num_attention_heads));
  }
  if (pad_token_id < 0 || pad_token_id >= vocab_size) {
    throw ConfigError("BERT config: pad_token_id " + std::to_string(pad_token_id) +
                      " is outside the vocabulary of " + std::to_string(vocab_size));
  }
  if (!(layer_norm_eps > 0)) throw ConfigError("BERT config: layer_norm_eps must be positive");
  for (const auto& [name, p] :
       {std::pair<const char*, double>{"hidden_dropout_prob", hidden_dropout_prob},
        {"attention_probs_dropout_prob", attention_probs_dropout_prob},
        {"classifier_dropout", head_dropout()}}) {
    if (!(p >= 0 && p < 1)) {
      throw ConfigError(std::string("BERT config: ") + name + " must be in [0, 1), not " +
                        std::to_string(p));
    }
  }
}

BertConfig read_bert_config(const std::string& path_or_folder) {
  const ConfigJson reader("BERT config", path_or_folder);

  const std::string model_type = reader.text("model_type", "bert");
  if (model_type != "bert") reader.fail("model_type \"" + model_type + "\" is not \"bert\"");
  const std::string position = reader.text("position_embedding_type", "absolute");
  if (position != "absolute") {
    reader.fail("position_embedding_type \"" + position + "\" is not supported (only absolute)");
  }
  BertConfig config;
  const std::string act = reader.text("hidden_act", "gelu");
  const auto activation = detail::parse_enum(kActivationNames, act, detail::NameCase::kExact);
  if (!activation) {
    reader.fail("hidden_act \"" + act +
                "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu)");
  }
  config.hidden_act = *activation;
  reader.require({"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size"});
  config.vocab_size = reader.integer("vocab_size", 0);
  config.hidden_size = reader.integer("hidden_size", 0);
  config.num_hidden_layers = reader.integer("num_hidden_layers", 0);
  config.num_attention_heads = reader.integer("num_attention_heads", 0);
  config.intermediate_size = reader.integer("intermediate_size", 0);
  config.hidden_dropout_prob = reader.number("hidden_dropout_prob", config.hidden_dropout_prob);
  config.attention_probs_dropout_prob =
      reader.number("attention_probs_dropout_prob", config.attention_probs_dropout_prob);
  config.max_position_embeddings =
      reader.integer("max_position_embeddings", config.max_position_embeddings);
  config.type_vocab_size = reader.integer("type_vocab_size", config.type_vocab_size);
  config.layer_norm_eps = reader.number("layer_norm_eps", config.layer_norm_eps);
  config.pad_token_id = reader.integer("pad_token_id", config.pad_token_id);
  if (reader.find("classifier_dropout")) {
    config.classifier_dropout = reader.number("classifier_dropout", 0.0);
  }
  config.id2label = read_labels(reader);
  if (reader.find("problem_type")) {
    const std::string type = reader.text("problem_type", "");
    const auto parsed = detail::parse_enum(kProblemTypeNames, type, detail::NameCase::kExact);
    if (!parsed) {
      reader.fail("problem_type \"" + type +
                  "\" is not one of regression, single_label_classification, "
                  "multi_label_classification");
    }
    config.problem_type = *parsed;
  }
  config.other_keys = reader.other_keys(kBertKeys);
  validate_from(config, reader.path());
  return config;
}

std::string bert_config_json(const BertConfig& config, const std::string& architecture,
                             const std::string& dtype) {
  json out = config_json_start(config.other_keys, "bert", architecture, dtype);
  out["vocab_size"] = config.vocab_size;
  out["hidden_size"] = config.hidden_size;
  out["num_hidden_layers"] = config.num_hidden_layers;
  out["num_attention_heads"] = config.num_attention_heads;
  out["intermediate_size"] = config.intermediate_size;
  out["hidden_act"] = to_string(config.hidden_act);
  out["hidden_dropout_prob"] = config.hidden_dropout_prob;
  out["attention_probs_dropout_prob"] = config.attention_probs_dropout_prob;
  out["max_position_embeddings"] = config.max_position_embeddings;
  out["type_vocab_size"] = config.type_vocab_size;
  out["layer_norm_eps"] = config.layer_norm_eps;
  out["pad_token_id"] = config.pad_token_id;
  out["position_embedding_type"] = "absolute";
  out["classifier_dropout"] =
      config.classifier_dropout ? json(*config.classifier_dropout) : json(nullptr);
  json id2label = json::object(), label2id = json::object();
  for (size_t i = 0; i < config.id2label.size(); ++i) {
    id2label[std::to_string(i)] = config.id2label[i];
    label2id[config.id2label[i]] = i;
  }
  out["id2label"] = id2label;
  out["label2id"] = label2id;
  out["problem_type"] = config.problem_type ? json(to_string(*config.problem_type)) : json(nullptr);
  return out.dump(2) + "\n";
}

void write_bert_config(const BertConfig& config, const std::string& directory,
                       const std::string& architecture, const std::string& dtype) {
  config.validate();
  write_config_file(directory, bert_config_json(config, architecture, dtype), "write_bert_config");
}

}  // namespace accelerate::models
