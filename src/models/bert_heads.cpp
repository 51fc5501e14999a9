// BertForSequenceClassification, its loss, and loading and saving of the
// BERT models (include/accelerate/models/bert.h). Loading goes through
// load_pretrained_weights with transformers' rules for BERT: base prefix
// "bert", the old "position_ids" buffer and pre-training heads ("cls.")
// skipped, a new classifier (and a pooler a checkpoint lacks) initialised.
#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>

#include "accelerate/common/errors.h"
#include "accelerate/models/bert.h"
#include "accelerate/models/pretrained.h"
#include "models/config_json.h"
#include "models/parallel_checks.h"
#include "models/pretrained_build.h"

namespace accelerate::models {
namespace {

PretrainedLoadOptions bert_load_rules(std::vector<std::string> allow_missing) {
  return PretrainedLoadOptions()
      .base_model_prefix("bert")
      .ignore_unexpected({"position_ids", "cls."})
      .allow_missing(std::move(allow_missing));
}

}  // namespace

ProblemType infer_problem_type(int64_t num_labels, const at::Tensor& labels) {
  if (num_labels == 1) return ProblemType::kRegression;
  if (labels.scalar_type() == at::kLong || labels.scalar_type() == at::kInt) {
    return ProblemType::kSingleLabelClassification;
  }
  return ProblemType::kMultiLabelClassification;
}

at::Tensor sequence_classification_loss(const at::Tensor& logits, const at::Tensor& labels,
                                        ProblemType type) {
  namespace F = torch::nn::functional;
  if (logits.dim() != 2 || labels.size(0) != logits.size(0)) {
    throw Error("sequence_classification_loss: logits " + c10::str(logits.sizes()) +
                " and labels " + c10::str(labels.sizes()) + " do not match ([batch, labels])");
  }
  const int64_t n = logits.size(1);
  const at::Tensor logits32 = logits.to(at::kFloat);
  switch (type) {
    case ProblemType::kRegression:
      // transformers squeezes both sides when there is one label.
      return n == 1 ? F::mse_loss(logits32.squeeze(), labels.to(at::kFloat).squeeze())
                    : F::mse_loss(logits32, labels.to(at::kFloat));
    case ProblemType::kSingleLabelClassification:
      if (at::isFloatingType(labels.scalar_type())) {
        throw Error(
            "sequence_classification_loss: single-label classification wants integer "
            "labels, not " +
            std::string(c10::toString(labels.scalar_type())));
      }
      return F::cross_entropy(logits32.view({-1, n}), labels.view({-1}).to(at::kLong));
    case ProblemType::kMultiLabelClassification:
      return F::binary_cross_entropy_with_logits(logits32, labels.to(at::kFloat));
  }
  throw Error("sequence_classification_loss: unknown problem type");
}

BertForSequenceClassificationImpl::BertForSequenceClassificationImpl(BertConfig config)
    : config_(std::move(config)) {
  bert = register_module("bert", BertModel(config_));
  classifier =
      register_module("classifier", torch::nn::Linear(config_.hidden_size, config_.num_labels()));
}

at::Tensor BertForSequenceClassificationImpl::forward(const at::Tensor& input_ids,
                                                      const at::Tensor& attention_mask,
                                                      const at::Tensor& token_type_ids) {
  const at::Tensor pooled = bert(input_ids, attention_mask, token_type_ids).pooler_output;
  return classifier(at::dropout(pooled, config_.head_dropout(), is_training()));
}

at::Tensor BertForSequenceClassificationImpl::loss(const at::Tensor& input_ids,
                                                   const at::Tensor& labels,
                                                   const at::Tensor& attention_mask,
                                                   const at::Tensor& token_type_ids) {
  const at::Tensor logits = forward(input_ids, attention_mask, token_type_ids);
  if (!config_.problem_type) {
    config_.problem_type = infer_problem_type(config_.num_labels(), labels);
  }
  return sequence_classification_loss(logits, labels, *config_.problem_type);
}

std::shared_ptr<BertModelImpl> BertModelImpl::from_pretrained(const std::string& folder,
                                                              const BertLoadOptions& options) {
  const BertConfig config = read_bert_config(folder);
  return build_pretrained<BertModelImpl>(
      [&config] { return std::make_shared<BertModelImpl>(config); }, folder, options.dtype(),
      bert_load_rules({"pooler."}));
}

std::vector<std::string> BertModelImpl::save_pretrained(const std::string& folder,
                                                        const ShardSize& max_shard_size) const {
  refuse_saving_split("BERT", tensor_parallel());
  auto files = save_pretrained_weights(*this, folder, max_shard_size);
  write_bert_config(config_, folder, "BertModel", saved_dtype_name(*this));
  return files;
}

std::shared_ptr<BertForSequenceClassificationImpl>
BertForSequenceClassificationImpl::from_pretrained(const std::string& folder,
                                                   const BertLoadOptions& options) {
  BertConfig config = read_bert_config(folder);
  if (options.num_labels() < 0) {
    throw ConfigError("BertForSequenceClassification: num_labels must be positive, not " +
                      std::to_string(options.num_labels()));
  }
  if (options.num_labels() > 0 && options.num_labels() != config.num_labels()) {
    config.set_num_labels(options.num_labels());
  }
  return build_pretrained<BertForSequenceClassificationImpl>(
      [&config] { return std::make_shared<BertForSequenceClassificationImpl>(config); }, folder,
      options.dtype(), bert_load_rules({"classifier.", "bert.pooler."}));
}

std::vector<std::string> BertForSequenceClassificationImpl::save_pretrained(
    const std::string& folder, const ShardSize& max_shard_size) const {
  refuse_saving_split("BERT", tensor_parallel());
  auto files = save_pretrained_weights(*this, folder, max_shard_size);
  write_bert_config(config_, folder, "BertForSequenceClassification", saved_dtype_name(*this));
  return files;
}

}  // namespace accelerate::models
