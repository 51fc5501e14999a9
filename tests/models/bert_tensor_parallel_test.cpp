// BERT split by its tensor-parallel plan on real ranks (threads over a
// FileStore, Gloo): transformers' tiny encoder and classifiers (padding,
// two segments, a vocabulary of 99 that 2 splits unevenly, the pad row
// on rank 0) at tp 2 give transformers' hidden states, pooled outputs,
// logits and loss, and each rank's part of every gradient, with and without
// Megatron's sequence parallelism; refusals are one line on every rank. Without the reference
// interpreter these tests report themselves skipped, but the refusals.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>

#include "accelerate/common/errors.h"
#include "accelerate/models/bert.h"
#include "accelerate/nn/tensor_parallel.h"
#include "reference_python.h"
#include "support/error_message.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace bert_tensor_parallel_test {

namespace am = accelerate::models;
using accelerate::Communicator;
using accelerate::TensorParallel;
using accelerate::testing::max_abs_diff;
using accelerate::testing::run_rank_communicators;

std::string variant_dir(const std::string& variant) {
  return accelerate::testing::reference_folder(BERT_REFERENCE_SCRIPT) + "/" + variant;
}

std::map<std::string, at::Tensor> reference_outputs(const std::string& variant) {
  return accelerate::testing::load_named_tensors(variant_dir(variant) + "/reference.safetensors");
}

// This rank's part of `whole` shaped as `part`: the rank's
// tensor_parallel_range along the dimension where they differ.
at::Tensor part_of(const at::Tensor& whole, const at::Tensor& part, const TensorParallel& tp) {
  for (int64_t d = 0; d < whole.dim(); ++d) {
    if (whole.size(d) == part.size(d)) continue;
    const auto range = accelerate::tensor_parallel_range(whole.size(d), tp);
    return whole.narrow(d, range.start, range.length);
  }
  return whole;
}

void expect_encoder_matches_transformers(bool sequence_parallel) {
  ASSERT_FALSE(accelerate::testing::reference_folder(BERT_REFERENCE_SCRIPT).empty());
  const auto reference = reference_outputs("encoder");
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    auto model = am::BertModelImpl::from_pretrained(variant_dir("encoder") + "/model");
    model->parallelize(TensorParallel(comm, sequence_parallel));
    EXPECT_EQ(model->embeddings->word_embeddings->weight.size(0), comm->rank() == 0 ? 50 : 49);
    model->eval();
    at::NoGradGuard no_grad;
    const auto out = model->forward(reference.at("input_ids"), reference.at("attention_mask"),
                                    reference.at("token_type_ids"));
    EXPECT_LE(max_abs_diff(out.last_hidden_state, reference.at("last_hidden_state")), 1e-5)
        << "rank " << comm->rank();
    EXPECT_LE(max_abs_diff(out.pooler_output, reference.at("pooler_output")), 1e-5);
  });
}

TEST(BertTensorParallel, Tp2EncoderEqualsTransformers) {
  REQUIRE_REFERENCE_PYTHON();
  expect_encoder_matches_transformers(/*sequence_parallel=*/false);
}

TEST(BertTensorParallel, Tp2SequenceParallelEncoderEqualsTransformers) {
  REQUIRE_REFERENCE_PYTHON();
  expect_encoder_matches_transformers(/*sequence_parallel=*/true);
}

// Each classifier (single-label, regression, multi-label) at tp 2: logits
// within 1e-5, the loss within 1e-4 relative, each rank's part of every
// gradient within 2e-4 of the largest of the same part of transformers'
// (twice the whole model's tests' bound, see below; key biases, whose
// gradient the softmax cancels, only small). With `sequence_parallel`, the
// LayerNorms' and the position and token-type embeddings' gradients, each
// rank's from its own tokens, must be summed over the group.
void expect_classifiers_match_transformers(bool sequence_parallel) {
  ASSERT_FALSE(accelerate::testing::reference_folder(BERT_REFERENCE_SCRIPT).empty());
  for (const std::string variant : {"single_label", "regression", "multi_label"}) {
    const auto reference = reference_outputs(variant);
    run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
      const TensorParallel tp(comm, sequence_parallel);
      am::BertForSequenceClassification model(
          am::BertForSequenceClassificationImpl::from_pretrained(variant_dir(variant) + "/model"));
      model->parallelize(tp);
      model->train();
      const at::Tensor loss =
          model->loss(reference.at("input_ids"), reference.at("labels"),
                      reference.at("attention_mask"), reference.at("token_type_ids"));
      const double expected = reference.at("loss").item<double>();
      EXPECT_LE(std::abs(loss.item<double>() - expected), 1e-4 * std::abs(expected)) << variant;
      {
        at::NoGradGuard no_grad;
        const at::Tensor logits =
            model->forward(reference.at("input_ids"), reference.at("attention_mask"),
                           reference.at("token_type_ids"));
        EXPECT_LE(max_abs_diff(logits, reference.at("logits")), 1e-5) << variant;
      }
      loss.backward();
      int split = 0;
      for (const auto& item : model->named_parameters()) {
        const at::Tensor& whole = reference.at("grad." + item.key());
        const at::Tensor& grad = item.value().grad();
        ASSERT_TRUE(grad.defined()) << item.key();
        split += !grad.sizes().equals(whole.sizes());
        const std::string& name = item.key();
        if (name.find("attention.self.key.bias") != std::string::npos) {
          EXPECT_LE(grad.abs().max().item<double>(), 1e-6) << variant << " " << name;
          continue;
        }
        // 2e-4 of the largest: once, at the busy start of a full run on
        // LibTorch 2.15, layer 1's LayerNorm weights on rank 1 came 1.13e-4
        // and 1.22e-4 off (below 1e-4 in every run alone; cause not found).
        // A missing sum over the group or a misplaced part is off by far more.
        EXPECT_LE(max_abs_diff(grad, part_of(whole, grad, tp)),
                  2e-4 * whole.abs().max().item<double>())
            << variant << " " << name << ", rank " << tp.rank();
      }
      // Per layer: query, key, value (weight and bias), intermediate (weight
      // and bias), the two rowwise weights; and the word embeddings.
      EXPECT_EQ(split, 2 * 10 + 1) << variant;
    });
  }
}

TEST(BertTensorParallel, Tp2ClassifiersEqualTransformers) {
  REQUIRE_REFERENCE_PYTHON();
  expect_classifiers_match_transformers(/*sequence_parallel=*/false);
}

TEST(BertTensorParallel, Tp2SequenceParallelClassifiersEqualTransformers) {
  REQUIRE_REFERENCE_PYTHON();
  expect_classifiers_match_transformers(/*sequence_parallel=*/true);
}

am::BertConfig tiny_config() {
  am::BertConfig config;
  config.vocab_size = 30, config.hidden_size = 24, config.num_hidden_layers = 1;
  config.num_attention_heads = 3, config.intermediate_size = 32;
  config.max_position_embeddings = 16;
  return config;
}

TEST(BertTensorParallel, WhatThePlanCannotSplitIsRefusedInOneLineOnEveryRank) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    am::BertModel three_heads(tiny_config());
    EXPECT_EQ(accelerate::testing::error_of([&] { three_heads->parallelize(tp); }),
              "BERT: num_attention_heads 3 is not divisible by tp_size 2");
    EXPECT_FALSE(three_heads->tensor_parallel().enabled()) << "nothing was split";
    am::BertConfig four_heads = tiny_config();
    four_heads.num_attention_heads = 4;
    am::BertModel megatron(four_heads);
    megatron->parallelize(TensorParallel(comm, /*sequence_parallel=*/true));
    EXPECT_EQ(accelerate::testing::error_of([&] {
                megatron->forward(at::ones({1, 7}, at::kLong));
              }),
              "BERT: 7 tokens are not divisible by tp_size 2 (tp_sequence_parallel splits them "
              "between the layers)");
    am::BertForSequenceClassification split(four_heads);
    split->parallelize(tp);
    EXPECT_EQ(accelerate::testing::error_of([&] { split->parallelize(tp); }),
              "BERT: the model is split over tp_size 2 already");
    accelerate::testing::TempDir dir;
    EXPECT_EQ(accelerate::testing::error_of([&] { split->save_pretrained(dir.path()); }),
              "BERT: save_pretrained of a model split over tp_size 2 would write parts of its "
              "tensors; save the model built whole");
  });
}

}  // namespace bert_tensor_parallel_test
