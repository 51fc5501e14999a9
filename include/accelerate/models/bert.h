// The BERT family (BERT, MiniLM, and encoders of the same layout) as
// LibTorch modules whose parameter names and arithmetic are transformers'
// BertModel's and BertForSequenceClassification's, so a Hugging Face folder
// loads into them and what they save loads in transformers:
//
//   namespace am = accelerate::models;
//   am::BertModel encoder(am::BertModelImpl::from_pretrained("all-MiniLM-L6-v2"));
//   auto out = encoder->forward(ids, attention_mask);   // ids, mask: [batch, tokens]
//   out.last_hidden_state;                              // [batch, tokens, hidden]
//   auto embedding = am::mean_pooling(out.last_hidden_state, attention_mask);
//
//   am::BertForSequenceClassification classifier(
//       am::BertForSequenceClassificationImpl::from_pretrained("all-MiniLM-L6-v2",
//           am::BertLoadOptions().num_labels(3)));      // a new head on the encoder
//   auto loss = classifier->loss(ids, labels, attention_mask);
//   classifier->save_pretrained("out");
//
// Post-LayerNorm blocks, bidirectional attention with a padding mask
// (accelerate::bidirectional_attention), GELU feed-forward. The encoder
// layers run through accelerate::unit_forward, so prepare() can make each
// one a ZeRO stage-3 unit, set_gradient_checkpointing(true) checkpoints
// their activations, and parallelize(tp) splits the layers over a
// tensor-parallel group (prepare() calls it at tp_size above 1). Dropout
// follows train()/eval(). No token ids
// come from here: a tokenizer gives them. See docs/models-bert.md.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <string>

#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/common/arg.h"
#include "accelerate/models/bert_config.h"
#include "accelerate/nn/parallel_layers.h"
#include "accelerate/nn/tensor_parallel_plan.h"

namespace accelerate::models {

// Word + position + token-type embeddings, LayerNorm, dropout.
class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertConfig& config);
  // token_type_ids undefined: all 0 (the first segment).
  // Under Megatron's sequence parallelism, this rank's tokens.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& token_type_ids);
  // Set by BertModelImpl::parallelize.
  void set_tensor_parallel(const TensorParallel& tp) { tensor_parallel_ = tp; }
  ParallelEmbedding word_embeddings{nullptr};  // as torch::nn::Embedding until split
  torch::nn::Embedding position_embeddings{nullptr}, token_type_embeddings{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};  // transformers' name

 private:
  TensorParallel tensor_parallel_;
  double dropout_;
};
TORCH_MODULE(BertEmbeddings);

class BertSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit BertSelfAttentionImpl(const BertConfig& config);
  // x: [batch, tokens, hidden]; key_mask: [batch, tokens] or undefined.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& key_mask);
  // Set by BertModelImpl::parallelize: this rank computes heads/tp heads
  // (query, key and value colwise).
  void set_tensor_parallel(const TensorParallel& tp) { tensor_parallel_ = tp; }
  ParallelLinear query{nullptr}, key{nullptr}, value{nullptr};

 private:
  TensorParallel tensor_parallel_;
  int64_t heads_, head_dim_;
  double dropout_;
};
TORCH_MODULE(BertSelfAttention);

// LayerNorm(dropout(dense(x)) + residual): after attention (hidden ->
// hidden) and after the intermediate layer (intermediate -> hidden).
class BertResidualOutputImpl : public torch::nn::Module {
 public:
  BertResidualOutputImpl(const BertConfig& config, int64_t in_features);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& residual);
  // Set by BertModelImpl::parallelize (dense rowwise).
  void set_tensor_parallel(const TensorParallel& tp) { tensor_parallel_ = tp; }
  ParallelLinear dense{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};

 private:
  TensorParallel tensor_parallel_;
  double dropout_;
};
TORCH_MODULE(BertResidualOutput);

// attention.self + attention.output.
class BertAttentionImpl : public torch::nn::Module {
 public:
  explicit BertAttentionImpl(const BertConfig& config);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& key_mask);
  BertSelfAttention self{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertAttention);

// act(dense(x)), hidden -> intermediate.
class BertIntermediateImpl : public torch::nn::Module {
 public:
  explicit BertIntermediateImpl(const BertConfig& config);
  at::Tensor forward(const at::Tensor& x);
  ParallelLinear dense{nullptr};

 private:
  BertActivation activation_;
};
TORCH_MODULE(BertIntermediate);

class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& config);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& key_mask);
  BertAttention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertLayer);

// Holds encoder.layer.N (a module of its own only for the names).
class BertEncoderImpl : public torch::nn::Module {
 public:
  explicit BertEncoderImpl(const BertConfig& config);
  torch::nn::ModuleList layer{nullptr};  // of BertLayer
};
TORCH_MODULE(BertEncoder);

// tanh(dense(hidden of the first token, [CLS])).
class BertPoolerImpl : public torch::nn::Module {
 public:
  explicit BertPoolerImpl(const BertConfig& config);
  at::Tensor forward(const at::Tensor& hidden);
  torch::nn::Linear dense{nullptr};
};
TORCH_MODULE(BertPooler);

struct BertOutput {
  at::Tensor last_hidden_state;  // [batch, tokens, hidden]
  at::Tensor pooler_output;      // [batch, hidden]
};

struct BertLoadOptions {
  // The parameters' dtype: checkpoint tensors of any floating dtype are
  // converted to it.
  ACCELERATE_ARG(at::ScalarType, dtype) = at::kFloat;
  // BertForSequenceClassification only: the number of labels of the head,
  // replacing the config's (0: the config's). A folder without a
  // classifier (a bare encoder such as MiniLM) gets a new head of this many
  // outputs.
  ACCELERATE_ARG(int64_t, num_labels) = 0;
};

// Parameters: embeddings.word_embeddings.weight, ...,
// encoder.layer.N.attention.self.query.weight, ..., pooler.dense.weight.
class BertModelImpl : public torch::nn::Module, public TensorParallelModel {
 public:
  // Random weights (LibTorch's default initialisation), fp32, on the CPU.
  explicit BertModelImpl(BertConfig config);
  // input_ids, attention_mask (1 real token, 0 padding; undefined: all
  // real) and token_type_ids (undefined: all 0), each [batch, tokens].
  BertOutput forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                     const at::Tensor& token_type_ids = {});

  // Builds the model from `folder`'s config.json and loads its weights,
  // saved with or without the "bert." prefix (a classifier's files: the
  // head is dropped). A folder without the pooler leaves it as initialised.
  static std::shared_ptr<BertModelImpl> from_pretrained(const std::string& folder,
                                                        const BertLoadOptions& options = {});
  // config.json (architectures ["BertModel"]) plus the weights, unprefixed.
  // Refused (one line) for a split model (Accelerator::save_model gathers).
  std::vector<std::string> save_pretrained(
      const std::string& folder, const ShardSize& max_shard_size = ShardSize("5GB")) const;

  // Activation checkpointing of every encoder layer (transformers'
  // gradient_checkpointing_enable()): while grad mode is on, each layer
  // keeps only its input and recomputes its forward in backward
  // (accelerate/memory/activation_checkpointing.h; still a ZeRO stage-3 unit).
  // Gradients are bitwise those of the plain run on the CPU. Off by default.
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }

  // The plan (no tp_plan in transformers for BERT; Megatron's split): per
  // layer attention.self.{query,key,value} colwise (heads),
  // attention.output.dense rowwise, intermediate.dense colwise,
  // output.dense rowwise; embeddings.word_embeddings by vocabulary (any
  // size: nothing is gathered); the other embeddings, the LayerNorms and
  // the pooler whole. `sequence_parallel`: every split layer takes
  // Megatron's sequence parallelism (the embeddings' sum, the LayerNorms,
  // the dropouts and the residuals between them run on each rank's 1/tp of
  // the tokens; the encoder's output is gathered whole for the heads).
  static TensorParallelPlan tensor_parallel_plan(bool sequence_parallel = false);
  // Splits the encoder over `tp` by that plan (with sequence parallelism
  // where tp.sequence_parallel()). Errors (one line, before any split):
  // num_attention_heads not divisible by tp's size; a model split already.
  // Under sequence parallelism a sequence whose tokens tp does not divide
  // is refused at forward.
  void parallelize(const TensorParallel& tp) override;
  const TensorParallel& tensor_parallel() const override { return tensor_parallel_; }

  const BertConfig& config() const { return config_; }
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};
  BertPooler pooler{nullptr};

 private:
  BertConfig config_;
  bool gradient_checkpointing_ = false;
  TensorParallel tensor_parallel_;
};
TORCH_MODULE(BertModel);

// Parameters: bert.<BertModel's>, classifier.weight, classifier.bias.
// A TensorParallelModel: parallelize splits the encoder (BertModelImpl's
// plan); the classifier stays whole.
class BertForSequenceClassificationImpl : public torch::nn::Module, public TensorParallelModel {
 public:
  explicit BertForSequenceClassificationImpl(BertConfig config);
  // Logits [batch, num_labels]: classifier(dropout(pooled output)).
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                     const at::Tensor& token_type_ids = {});
  // transformers' loss for the config's problem_type; unset, it is decided
  // here once (and kept, as transformers does): 1 label -> regression (MSE),
  // integer labels -> single-label (cross-entropy, -100 ignored), else
  // multi-label (BCE with logits). labels: [batch] or [batch, num_labels].
  at::Tensor loss(const at::Tensor& input_ids, const at::Tensor& labels,
                  const at::Tensor& attention_mask = {}, const at::Tensor& token_type_ids = {});

  // Loads a classifier's folder, or a bare encoder's (the head then keeps
  // its random initialisation, as in transformers).
  static std::shared_ptr<BertForSequenceClassificationImpl> from_pretrained(
      const std::string& folder, const BertLoadOptions& options = {});
  std::vector<std::string> save_pretrained(
      const std::string& folder, const ShardSize& max_shard_size = ShardSize("5GB")) const;

  void parallelize(const TensorParallel& tp) override { bert->parallelize(tp); }
  const TensorParallel& tensor_parallel() const override { return bert->tensor_parallel(); }

  const BertConfig& config() const { return config_; }
  BertModel bert{nullptr};
  torch::nn::Linear classifier{nullptr};

 private:
  BertConfig config_;
};
TORCH_MODULE(BertForSequenceClassification);

// transformers' sequence-classification loss on logits [batch, labels].
at::Tensor sequence_classification_loss(const at::Tensor& logits, const at::Tensor& labels,
                                        ProblemType type);
// The problem type transformers picks for `num_labels` and `labels`.
ProblemType infer_problem_type(int64_t num_labels, const at::Tensor& labels);

// sentence-transformers' mean pooling: the mean of the hidden states of the
// real tokens (attention_mask 1), [batch, tokens, hidden] -> [batch, hidden].
at::Tensor mean_pooling(const at::Tensor& hidden, const at::Tensor& attention_mask);

}  // namespace accelerate::models
