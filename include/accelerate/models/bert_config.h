// The shape of a BERT-family encoder, as Hugging Face's config.json gives it
// (transformers' BertConfig): read it with read_bert_config, write it back
// with write_bert_config so transformers' from_pretrained reads what we save.
//
//   auto config = accelerate::models::read_bert_config("all-MiniLM-L6-v2");
//   config.set_num_labels(3);   // a classification head of 3 classes
//
// Keys this library does not model ("initializer_range", "use_cache",
// "architectures" of the source, ...) are kept and written back unchanged.
// See docs/models-bert.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accelerate::models {

// The feed-forward activation (transformers' hidden_act); a closed set:
// others are refused by read_bert_config, naming the value.
enum class BertActivation {
  kGelu,      // "gelu": the exact, erf-based GELU (BERT's and MiniLM's)
  kGeluTanh,  // "gelu_new" / "gelu_pytorch_tanh": the tanh approximation
  kRelu,      // "relu"
};

// How BertForSequenceClassification's loss treats its labels
// (transformers' problem_type). Unset in the config: decided at the first
// loss as transformers does (1 label: regression; integer labels:
// single-label; else multi-label).
enum class ProblemType {
  kRegression,                 // MSE on the logits
  kSingleLabelClassification,  // cross-entropy, integer labels
  kMultiLabelClassification,   // binary cross-entropy with logits, float labels
};

// Field names and defaults are transformers' BertConfig's.
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  BertActivation hidden_act = BertActivation::kGelu;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  int64_t pad_token_id = 0;
  // The classification head's dropout; unset: hidden_dropout_prob.
  std::optional<double> classifier_dropout;
  // The classification head's labels, index -> name (transformers'
  // id2label); its size is num_labels. transformers' default: 2 labels.
  std::vector<std::string> id2label = {"LABEL_0", "LABEL_1"};
  std::optional<ProblemType> problem_type;
  // Keys of the file this library does not model, each with its JSON text.
  std::map<std::string, std::string> other_keys;

  int64_t num_labels() const { return static_cast<int64_t>(id2label.size()); }
  // n labels named LABEL_0 ... LABEL_{n-1}, as transformers' num_labels=n.
  void set_num_labels(int64_t n);
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  double head_dropout() const { return classifier_dropout.value_or(hidden_dropout_prob); }
  // Throws accelerate::ConfigError with one line naming the bad field.
  void validate() const;
};

// Reads a config.json (or the folder holding one). Throws ConfigError with
// one line naming the file and the missing or bad key; a "model_type" other
// than "bert", a "position_embedding_type" other than "absolute" or an
// unknown "hidden_act" or "problem_type" is refused.
BertConfig read_bert_config(const std::string& path);

// The config as transformers writes it (model_type "bert", `architecture`
// in "architectures", id2label and label2id). `dtype`: the weights' dtype
// name ("float32", ...); empty keeps the source's.
std::string bert_config_json(const BertConfig& config, const std::string& architecture,
                             const std::string& dtype = "");
// Writes bert_config_json into `directory`/config.json (directory created).
void write_bert_config(const BertConfig& config, const std::string& directory,
                       const std::string& architecture, const std::string& dtype = "");

const char* to_string(BertActivation activation);
const char* to_string(ProblemType type);

}  // namespace accelerate::models
