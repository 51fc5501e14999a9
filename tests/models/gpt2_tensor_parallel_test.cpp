// GPT-2 split by its tensor-parallel plan on real ranks (threads over a
// FileStore, Gloo): transformers' tiny models at tp 2 give transformers'
// logits, loss and gradients (each rank's parts of them, c_attn's taken per
// block of queries, keys and values); 50 AdamW steps at tp 2 follow tp 1's
// losses; tp 2 x Ulysses sp 2 on four ranks equals the unsplit model; all of
// it again with Megatron's sequence parallelism; sizes the plan cannot split
// are refused in one line on every rank. Without the
// reference interpreter the transformers tests report themselves skipped.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/models/gpt2.h"
#include "accelerate/nn/tensor_parallel.h"
#include "reference_python.h"
#include "support/error_message.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "tensor_parallel_steps.h"

namespace gpt2_tensor_parallel_test {

namespace am = accelerate::models;
using accelerate::Communicator;
using accelerate::TensorParallel;
using accelerate::testing::run_rank_communicators;

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-12);
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / scale;
}

// This rank's part of `whole` shaped as `part`, written out here rather than
// through the library's layout code: along the dimension where they differ,
// each of `blocks` equal blocks narrowed to the rank's range of it.
at::Tensor part_of(const at::Tensor& whole, const at::Tensor& part, const TensorParallel& tp,
                   int64_t blocks) {
  for (int64_t d = 0; d < whole.dim(); ++d) {
    if (whole.size(d) == part.size(d)) continue;
    const int64_t block = whole.size(d) / blocks;
    const auto range = accelerate::tensor_parallel_range(block, tp);
    std::vector<at::Tensor> pieces;
    for (int64_t b = 0; b < blocks; ++b) {
      pieces.push_back(whole.narrow(d, b * block + range.start, range.length));
    }
    return at::cat(pieces, d);
  }
  return whole;
}

// c_attn's output is queries, keys and values side by side.
int64_t blocks_of(const std::string& name) {
  return name.find("c_attn") != std::string::npos ? 3 : 1;
}

// ---- Against transformers -------------------------------------------------

std::map<std::string, at::Tensor> reference_outputs(const std::string& variant) {
  return accelerate::testing::load_named_tensors(
      accelerate::testing::reference_folder(GPT2_REFERENCE_SCRIPT) + "/" + variant +
      "/reference.safetensors");
}

am::GPT2LMHeadModel reference_model(const std::string& variant) {
  return am::GPT2LMHeadModel(am::GPT2LMHeadModelImpl::from_pretrained(
      accelerate::testing::reference_folder(GPT2_REFERENCE_SCRIPT) + "/" + variant + "/model"));
}

// At tp `size`: logits within 1e-5 of transformers' on every rank, the loss
// within 1e-4 relative, and each rank's part of every gradient within 1e-4
// of the same part of transformers' (the bounds of the whole model's tests).
// With `sequence_parallel`, Megatron's: the LayerNorms' and wpe's gradients,
// each rank's from its own tokens, must be summed over the group to be
// transformers'.
void expect_split_matches_transformers(const std::string& variant, int size,
                                       bool sequence_parallel = false) {
  ASSERT_FALSE(accelerate::testing::reference_folder(GPT2_REFERENCE_SCRIPT).empty());
  const auto reference = reference_outputs(variant);
  run_rank_communicators(size, [&](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm, sequence_parallel);
    auto model = reference_model(variant);
    model->parallelize(tp);
    {
      at::NoGradGuard no_grad;
      const at::Tensor logits = model->forward(reference.at("input_ids"));
      ASSERT_EQ(logits.sizes(), reference.at("logits").sizes());
      EXPECT_LE(accelerate::testing::max_abs_diff(logits, reference.at("logits")), 1e-5)
          << variant << ", rank " << tp.rank();
    }
    const at::Tensor loss = model->loss(reference.at("input_ids"), reference.at("labels"));
    const double expected = reference.at("loss").item<double>();
    EXPECT_LE(std::abs(loss.item<double>() - expected), 1e-4 * std::abs(expected)) << variant;
    loss.backward();
    int split = 0;
    for (const auto& item : model->named_parameters()) {
      const at::Tensor& whole = reference.at("grad." + item.key());
      const at::Tensor& grad = item.value().grad();
      ASSERT_TRUE(grad.defined()) << item.key();
      split += !grad.sizes().equals(whole.sizes());
      EXPECT_LE(
          accelerate::testing::max_abs_diff(grad, part_of(whole, grad, tp, blocks_of(item.key()))),
          1e-4 * whole.abs().max().item<double>())
          << variant << " " << item.key() << ", rank " << tp.rank();
    }
    // Per block: c_attn's weight and bias, c_proj's weight, c_fc's weight
    // and bias, mlp.c_proj's weight; and wte.
    EXPECT_GE(split, 6 * 2 + 1) << "the plan split every block's projections";
  });
}

TEST(GPT2TensorParallel, Tp2EqualsTransformersTied) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("plain", 2);
}

TEST(GPT2TensorParallel, Tp4EqualsTransformersTied) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("plain", 4);
}

TEST(GPT2TensorParallel, Tp2EqualsTransformersUntiedScaled) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("untied_scaled", 2);
}

TEST(GPT2TensorParallel, Tp2EqualsTransformersUnscaledRelu) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("sharded", 2);
}

TEST(GPT2TensorParallel, Tp2SequenceParallelEqualsTransformersTied) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("plain", 2, /*sequence_parallel=*/true);
}

TEST(GPT2TensorParallel, Tp2SequenceParallelEqualsTransformersUntiedScaled) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("untied_scaled", 2, /*sequence_parallel=*/true);
}

// ---- Training ---------------------------------------------------------------

constexpr int64_t kVocab = 48, kTokens = 16;

am::GPT2Config tiny_config(bool tied = true) {
  am::GPT2Config config;
  config.vocab_size = kVocab;
  config.n_positions = kTokens;
  config.n_embd = 32;
  config.n_layer = 2;
  config.n_head = 4;
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0;
  config.tie_word_embeddings = tied;
  return config;
}

std::vector<at::Tensor> initial_parameters(bool tied) {
  return accelerate::testing::initial_parameters_of(
      [tied] { return am::GPT2LMHeadModel(tiny_config(tied)); }, 23);
}

am::GPT2LMHeadModel model_from(const std::vector<at::Tensor>& initial, bool tied) {
  return accelerate::testing::model_with([tied] { return am::GPT2LMHeadModel(tiny_config(tied)); },
                                         initial);
}

at::Tensor batch(int step) { return accelerate::testing::step_batch(step, kVocab, kTokens); }

// At 1e-2 the two runs' different rounding (sums of halves) grows
// chaotically past 1e-5 by step 23; at 3e-3 it stays at rounding.
std::vector<double> train(am::GPT2LMHeadModel& model) {
  return accelerate::testing::adamw_losses(model, 3e-3, 50, kVocab, kTokens);
}

void expect_fifty_steps_follow_tp1(bool tied, bool sequence_parallel) {
  const auto initial = initial_parameters(tied);
  auto whole = model_from(initial, tied);
  const std::vector<double> expected = train(whole);
  ASSERT_LT(expected.back(), 0.9 * expected.front()) << "the model learns";
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    auto model = model_from(initial, tied);
    model->parallelize(TensorParallel(comm, sequence_parallel));
    // Memory: all but wpe, the LayerNorms and the rowwise biases is split,
    // each rank holding half of it.
    int64_t kept_whole = 0, held = 0, whole_numel = 0;
    for (const auto& item : whole->named_parameters()) {
      const std::string& name = item.key();
      whole_numel += item.value().numel();
      const bool rowwise_bias = name.find("c_proj.bias") != std::string::npos;
      if (name.find("wpe") != std::string::npos || name.find("ln_") != std::string::npos ||
          rowwise_bias) {
        kept_whole += item.value().numel();
      }
    }
    for (const auto& p : model->parameters()) held += p.numel();
    EXPECT_EQ(held, kept_whole + (whole_numel - kept_whole) / 2);
    const std::vector<double> losses = train(model);
    for (size_t step = 0; step < losses.size(); ++step) {
      EXPECT_LE(std::abs(losses[step] - expected[step]), 1e-5 * expected[step])
          << "step " << step << ", rank " << comm->rank()
          << (sequence_parallel ? ", sequence parallel" : "");
    }
  });
}

TEST(GPT2TensorParallel, FiftyStepsAtTp2FollowTp1sLossesTied) {
  expect_fifty_steps_follow_tp1(/*tied=*/true, /*sequence_parallel=*/false);
}

TEST(GPT2TensorParallel, FiftyStepsAtTp2FollowTp1sLossesUntied) {
  expect_fifty_steps_follow_tp1(/*tied=*/false, /*sequence_parallel=*/false);
}

TEST(GPT2TensorParallel, FiftyStepsAtTp2SequenceParallelFollowTp1sLossesTied) {
  expect_fifty_steps_follow_tp1(/*tied=*/true, /*sequence_parallel=*/true);
}

TEST(GPT2TensorParallel, Tp2TimesSequenceParallel2EqualsTheUnsplitModel) {
  const auto initial = initial_parameters(true);
  auto whole = model_from(initial, true);
  const at::Tensor whole_loss = whole->loss(batch(0), batch(0));
  whole_loss.backward();
  const auto whole_parameters = whole->named_parameters();
  // Ulysses over sp, and tp with and without Megatron's sequence
  // parallelism (which splits each rank's slice again, over tp).
  for (bool megatron : {false, true})
    run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
      // tp innermost (ranks 0-1, 2-3), sp across (0-2, 1-3), as the mesh orders them.
      const auto tp_group = comm->split({{0, 1}, {2, 3}});
      const auto sp_group = comm->split({{0, 2}, {1, 3}});
      const TensorParallel tp(tp_group, megatron);
      auto model = model_from(initial, true);
      model->parallelize(tp);
      model->use_sequence_parallel(accelerate::SequenceParallel(sp_group));
      const at::Tensor loss = model->loss(batch(0), batch(0));
      EXPECT_NEAR(loss.item<double>(), whole_loss.item<double>(), 1e-6 * whole_loss.item<double>());
      loss.backward();
      // The data-parallel engines average over the sp ranks (which hold the
      // same parts): the same here.
      for (const auto& item : model->named_parameters()) {
        at::Tensor mean = item.value().grad().clone();
        sp_group->all_reduce(mean, accelerate::ReduceOp::kSum);
        mean /= 2;
        const at::Tensor& expected = whole_parameters[item.key()].grad();
        EXPECT_LT(relative_error(mean, part_of(expected, mean, tp, blocks_of(item.key()))), 1e-5)
            << item.key() << ", rank " << comm->rank() << (megatron ? ", megatron" : "");
      }
    });
}

TEST(GPT2TensorParallel, WhatThePlanCannotSplitIsRefusedInOneLineOnEveryRank) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    am::GPT2Config three_heads = tiny_config();
    three_heads.n_embd = 24;
    three_heads.n_head = 3;
    am::GPT2LMHeadModel odd_heads(three_heads);
    EXPECT_EQ(accelerate::testing::error_of([&] { odd_heads->parallelize(tp); }),
              "GPT-2: n_head 3 is not divisible by tp_size 2");
    EXPECT_FALSE(odd_heads->tensor_parallel().enabled()) << "nothing was split";
    am::GPT2LMHeadModel megatron(tiny_config());
    megatron->parallelize(TensorParallel(comm, /*sequence_parallel=*/true));
    const at::Tensor odd_tokens = at::zeros({1, kTokens - 1}, at::kLong);
    EXPECT_EQ(accelerate::testing::error_of([&] { megatron->loss(odd_tokens, odd_tokens); }),
              "GPT-2: 15 tokens are not divisible by tp_size 2 (tp_sequence_parallel splits them "
              "between the layers)");
    am::GPT2Config odd_vocab = tiny_config();
    odd_vocab.vocab_size = 47;
    am::GPT2LMHeadModel odd(odd_vocab);
    EXPECT_EQ(accelerate::testing::error_of([&] { odd->parallelize(tp); }),
              "GPT-2: vocab_size (the logits are gathered whole) 47 is not divisible by tp_size 2");
    am::GPT2LMHeadModel split(tiny_config());
    split->parallelize(tp);
    EXPECT_EQ(accelerate::testing::error_of([&] { split->parallelize(tp); }),
              "GPT-2: the model is split over tp_size 2 already");
    EXPECT_EQ(accelerate::testing::error_of([&] {
                split->transformer->h->ptr<am::GPT2BlockImpl>(0)->attn->c_attn->parallelize(
                    accelerate::TensorParallelStyle::kColwiseRep, tp);
              }),
              "GPT2Conv1D (colwise, tp 2): already split; a layer is split once");
    am::GPT2Conv1D fused(8, 12, 0.02, /*fused_outputs=*/3);
    EXPECT_EQ(accelerate::testing::error_of(
                  [&] { fused->parallelize(accelerate::TensorParallelStyle::kColwiseRep, tp); }),
              "GPT2Conv1D (colwise_rep, tp 2): its output is 3 fused blocks, which a gathered "
              "result would interleave; use colwise");
    accelerate::testing::TempDir dir;
    EXPECT_EQ(accelerate::testing::error_of([&] { split->save_pretrained(dir.path()); }),
              "GPT-2: save_pretrained of a model split over tp_size 2 would write parts of its "
              "tensors; save the model built whole");
  });
  run_rank_communicators(4, [](std::shared_ptr<Communicator> comm) {
    const auto tp_group = comm->split({{0, 1}, {2, 3}});
    const auto sp_group = comm->split({{0, 2}, {1, 3}});
    am::GPT2Config two_heads = tiny_config();
    two_heads.n_head = 2;
    am::GPT2LMHeadModel model(two_heads);
    model->parallelize(TensorParallel(tp_group));
    EXPECT_EQ(accelerate::testing::error_of(
                  [&] { model->use_sequence_parallel(accelerate::SequenceParallel(sp_group)); }),
              "GPT-2: n_head / tp_size 1 is not divisible by sp_size 2");
  });
}

// A fused Conv1D split colwise and gathered whole again gives back its
// weights bitwise, each rank having held its range of every block.
TEST(GPT2TensorParallel, AFusedConv1DSplitsEachBlockAndGathersBackWhole) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    torch::manual_seed(5);
    am::GPT2Conv1D conv(4, 18, 0.02, /*fused_outputs=*/3);
    {
      at::NoGradGuard no_grad;
      conv->bias.copy_(at::arange(18, at::kFloat));
    }
    const at::Tensor weight = conv->weight.detach().clone();
    conv->parallelize(accelerate::TensorParallelStyle::kColwise, tp);
    ASSERT_EQ(conv->weight.sizes(), (std::vector<int64_t>{4, 9}));
    const int64_t r = tp.rank();
    // Bias values are their whole index: blocks of 6, this rank's 3 of each.
    EXPECT_TRUE(
        at::equal(conv->bias, at::tensor({0 + 3 * r, 1 + 3 * r, 2 + 3 * r, 6 + 3 * r, 7 + 3 * r,
                                          8 + 3 * r, 12 + 3 * r, 13 + 3 * r, 14 + 3 * r},
                                         at::kFloat)));
    const std::vector<accelerate::TensorParallelPart> parts = conv->split_parts();
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_TRUE(at::equal(accelerate::gather_whole(conv->weight.detach(), parts[0]), weight));
  });
}

}  // namespace gpt2_tensor_parallel_test
