// Tensor parallelism's layers on real ranks (threads over a FileStore,
// Gloo): a column-then-row Linear pair split over 2 and 4 ranks (evenly and
// not) against the unsplit pair, forward and every gradient; the same with
// Megatron's sequence parallelism; the gathered (colwise_rep) and
// whole-input rowwise forms; the vocab-parallel embedding and cross-entropy
// against LibTorch's whole ones; what a pair moves; the one-line refusals.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/communicator.h"
#include "accelerate/nn/cross_entropy.h"
#include "accelerate/nn/parallel_layers.h"
#include "accelerate/nn/tensor_parallel.h"
#include "support/tensor_compare.h"
#include "support/thread_ranks.h"

namespace tensor_parallel_test {

using accelerate::Communicator;
using accelerate::ParallelEmbedding;
using accelerate::ParallelLinear;
using accelerate::TensorParallel;
using accelerate::TensorParallelRange;
using accelerate::TensorParallelStyle;
using accelerate::testing::Draws;
using accelerate::testing::relative_error;
using accelerate::testing::run_rank_communicators;

// The whole pair y = down(gelu(up(x))) and its input.
struct PairCase {
  torch::Tensor x, up_weight, up_bias, down_weight, down_bias, upstream;
};

PairCase pair_case(int64_t width, int64_t hidden) {
  Draws draw(11);
  return {draw({2, 8, width}),   draw({hidden, width}), draw({hidden}),
          draw({width, hidden}), draw({width}),         draw({2, 8, width})};
}

struct PairResult {
  torch::Tensor y, x_grad, up_weight_grad, up_bias_grad, down_weight_grad, down_bias_grad;
};

PairResult unsplit_pair(const PairCase& c) {
  auto x = c.x.clone().requires_grad_();
  auto w1 = c.up_weight.clone().requires_grad_(), b1 = c.up_bias.clone().requires_grad_();
  auto w2 = c.down_weight.clone().requires_grad_(), b2 = c.down_bias.clone().requires_grad_();
  auto y = torch::linear(torch::gelu(torch::linear(x, w1, b1)), w2, b2);
  y.backward(c.upstream);
  return {y.detach(), x.grad(), w1.grad(), b1.grad(), w2.grad(), b2.grad()};
}

ParallelLinear layer_with(const torch::Tensor& weight, const torch::Tensor& bias) {
  ParallelLinear layer(weight.size(1), weight.size(0));
  torch::NoGradGuard no_grad;
  layer->weight.copy_(weight);
  layer->bias.copy_(bias);
  return layer;
}

// The pair split over `tp` (up colwise, down rowwise), on this rank; the
// result and x's gradient whole, the parameters' gradients this rank's parts.
PairResult split_pair(const PairCase& c, const TensorParallel& tp, bool sequence_parallel) {
  ParallelLinear up = layer_with(c.up_weight, c.up_bias);
  ParallelLinear down = layer_with(c.down_weight, c.down_bias);
  up->parallelize(TensorParallelStyle::kColwise, tp, sequence_parallel);
  down->parallelize(TensorParallelStyle::kRowwise, tp, sequence_parallel);
  auto x = c.x.clone().requires_grad_();
  torch::Tensor y;
  if (sequence_parallel) {
    // Each rank's tokens between the blocks; gathered back to compare.
    auto slice = accelerate::scatter_tokens(x, tp);
    auto y_slice = down(torch::gelu(up(slice)));
    y_slice.backward(accelerate::scatter_tokens(c.upstream, tp));
    y = accelerate::gather_from_tensor_parallel(y_slice.detach(), tp, 1);
  } else {
    y = down(torch::gelu(up(x)));
    y.backward(c.upstream);
  }
  return {y.detach(),          x.grad(),         up->weight.grad(), up->bias.grad(),
          down->weight.grad(), down->bias.grad()};
}

// The largest relative error, over the ranks, of the split pair's result
// and every gradient against the unsplit pair's (parts against parts).
double worst_pair_error(int world, int64_t hidden, bool sequence_parallel) {
  std::vector<double> errors(world, 1.0);
  run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    const PairCase c = pair_case(/*width=*/12, hidden);
    const PairResult whole = unsplit_pair(c);
    const PairResult split = split_pair(c, tp, sequence_parallel);
    const TensorParallelRange mine = accelerate::tensor_parallel_range(hidden, tp);
    EXPECT_EQ(split.up_weight_grad.size(0), mine.length);
    errors[comm->rank()] = std::max(
        {relative_error(split.y, whole.y), relative_error(split.x_grad, whole.x_grad),
         relative_error(split.up_weight_grad,
                        whole.up_weight_grad.narrow(0, mine.start, mine.length)),
         relative_error(split.up_bias_grad, whole.up_bias_grad.narrow(0, mine.start, mine.length)),
         relative_error(split.down_weight_grad,
                        whole.down_weight_grad.narrow(1, mine.start, mine.length)),
         relative_error(split.down_bias_grad, whole.down_bias_grad)});
  });
  return *std::max_element(errors.begin(), errors.end());
}

TEST(TensorParallelLayers, ColumnThenRowPairEqualsTheUnsplitPair) {
  for (int tp : {2, 4}) EXPECT_LE(worst_pair_error(tp, 32, false), 1e-6) << "tp " << tp;
  // 30 hidden features over 4 ranks: parts of 8, 8, 7 and 7.
  EXPECT_LE(worst_pair_error(4, 30, false), 1e-6) << "tp 4, uneven";
}

TEST(TensorParallelLayers, SequenceParallelPairEqualsTheUnsplitPair) {
  for (int tp : {2, 4}) EXPECT_LE(worst_pair_error(tp, 32, true), 1e-6) << "tp " << tp;
}

TEST(TensorParallelLayers, LayersNeverSplitDrawAsLibTorchsAndSplitOnesKeepTheirPart) {
  torch::manual_seed(5);
  torch::nn::Linear plain(7, 9);
  torch::nn::Embedding plain_embedding(11, 3);
  torch::manual_seed(5);
  ParallelLinear ours(7, 9);
  ParallelEmbedding our_embedding(11, 3);
  EXPECT_TRUE(torch::equal(ours->weight, plain->weight));
  EXPECT_TRUE(torch::equal(ours->bias, plain->bias));
  EXPECT_TRUE(torch::equal(our_embedding->weight, plain_embedding->weight));
  EXPECT_EQ(ours->named_parameters().keys(), plain->named_parameters().keys());

  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    ParallelLinear column = layer_with(plain->weight.detach(), plain->bias.detach());
    ParallelLinear row = layer_with(plain->weight.detach(), plain->bias.detach());
    const torch::Tensor parameter = column->weight;  // what an optimizer would hold
    column->parallelize(TensorParallelStyle::kColwise, tp);
    row->parallelize(TensorParallelStyle::kRowwise, tp);
    const TensorParallelRange out = accelerate::tensor_parallel_range(9, tp);
    const TensorParallelRange in = accelerate::tensor_parallel_range(7, tp);
    EXPECT_TRUE(torch::equal(column->weight, plain->weight.narrow(0, out.start, out.length)));
    EXPECT_TRUE(torch::equal(column->bias, plain->bias.narrow(0, out.start, out.length)));
    EXPECT_TRUE(torch::equal(row->weight, plain->weight.narrow(1, in.start, in.length)));
    EXPECT_TRUE(torch::equal(row->bias, plain->bias));
    EXPECT_TRUE(parameter.is_same(column->weight));
    EXPECT_EQ(column->weight_split_dim(), 0);
    EXPECT_EQ(row->weight_split_dim(), 1);
    // A clone is the same split layer.
    auto copy = std::dynamic_pointer_cast<accelerate::ParallelLinearImpl>(column->clone());
    ASSERT_TRUE(copy);
    EXPECT_TRUE(torch::equal(copy->weight, column->weight));
    EXPECT_EQ(copy->weight_split_dim(), 0);
  });
}

TEST(TensorParallelLayers, ColwiseRepAndAWholeRowwiseInputGiveTheWholeResult) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    Draws draw(3);
    const auto weight = draw({6, 4}), bias = draw({6}), x0 = draw({5, 4}), up = draw({5, 6});
    const auto row_weight = draw({3, 6}), row_bias = draw({3}), row_up = draw({5, 3});
    const auto row_x0 = draw({5, 6});

    auto x = x0.clone().requires_grad_(), w = weight.clone().requires_grad_();
    torch::linear(x, w, bias).backward(up);
    ParallelLinear gathered = layer_with(weight, bias);
    gathered->parallelize(TensorParallelStyle::kColwiseRep, tp);
    auto x_split = x0.clone().requires_grad_();
    auto y = gathered(x_split);
    EXPECT_LE(relative_error(y, torch::linear(x0, weight, bias)), 1e-6);
    y.backward(up);
    EXPECT_LE(relative_error(x_split.grad(), x.grad()), 1e-6);
    EXPECT_LE(relative_error(gathered->weight.grad(), w.grad().narrow(0, 3 * tp.rank(), 3)), 1e-6);

    auto rx = row_x0.clone().requires_grad_();
    torch::linear(rx, row_weight, row_bias).backward(row_up);
    ParallelLinear row = layer_with(row_weight, row_bias);
    row->parallelize(TensorParallelStyle::kRowwise, tp);
    auto rx_split = row_x0.clone().requires_grad_();
    auto ry = row(rx_split);  // the whole input: this rank's part is taken
    EXPECT_LE(relative_error(ry, torch::linear(row_x0, row_weight, row_bias)), 1e-6);
    ry.backward(row_up);
    EXPECT_LE(relative_error(rx_split.grad(), rx.grad()), 1e-6);
  });
}

TEST(TensorParallelLayers, VocabParallelEmbeddingEqualsTheWholeEmbedding) {
  // 10 rows over 4 ranks (3, 3, 2, 2) with a padding row; 16 over 2.
  for (const auto& [world, vocabulary, padding] :
       std::vector<std::tuple<int, int64_t, int64_t>>{{4, 10, 3}, {2, 16, -1}}) {
    run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
      const TensorParallel tp(comm);
      Draws draw(4);
      const auto whole = draw({vocabulary, 5}), upstream = draw({3, 7, 5});
      const auto ids = at::randint(vocabulary, {3, 7}, draw.generator, at::kLong);
      auto options = torch::nn::EmbeddingOptions(vocabulary, 5);
      if (padding >= 0) options.padding_idx(padding);
      auto w = whole.clone().requires_grad_();
      auto reference_options = torch::nn::functional::EmbeddingFuncOptions();
      if (padding >= 0) reference_options.padding_idx(padding);
      torch::nn::functional::embedding(ids, w, reference_options).backward(upstream);
      ParallelEmbedding embedding(options);
      {
        torch::NoGradGuard no_grad;
        embedding->weight.copy_(whole);
      }
      embedding->parallelize(TensorParallelStyle::kRowwise, tp);
      const TensorParallelRange rows = embedding->vocabulary_range();
      EXPECT_EQ(rows.start, accelerate::tensor_parallel_range(vocabulary, tp).start);
      auto y = embedding(ids);
      EXPECT_TRUE(torch::equal(y, torch::embedding(whole, ids)));
      y.backward(upstream);
      EXPECT_LE(
          relative_error(embedding->weight.grad(), w.grad().narrow(0, rows.start, rows.length)),
          1e-6)
          << "tp " << world << ", rank " << tp.rank();
    });
  }
}

// The vocab-parallel loss and its logits' gradient against LibTorch's whole
// cross-entropy (the same as PyTorch's), rows with ignored targets among them.
void expect_loss_matches(int world, int64_t classes, accelerate::LossReduction reduction) {
  run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    Draws draw(8);
    const auto logits = draw({12, classes}) * 3;
    auto targets = at::randint(classes, {12}, draw.generator, at::kLong);
    targets.index_put_({torch::tensor({1, 6})}, -100);
    namespace F = torch::nn::functional;
    auto reference = F::CrossEntropyFuncOptions().ignore_index(-100);
    if (reduction == accelerate::LossReduction::kSum) reference.reduction(torch::kSum);
    if (reduction == accelerate::LossReduction::kNone) reference.reduction(torch::kNone);
    auto whole = logits.clone().requires_grad_();
    auto expected = F::cross_entropy(whole, targets, reference);
    const auto upstream =
        reduction == accelerate::LossReduction::kNone ? draw({12}) : torch::ones({});
    expected.backward(upstream);
    const TensorParallelRange mine = accelerate::tensor_parallel_range(classes, tp);
    auto part = logits.narrow(1, mine.start, mine.length).clone().requires_grad_();
    auto loss = accelerate::vocab_parallel_cross_entropy(
        part, targets, classes, tp, accelerate::CrossEntropyOptions().reduction(reduction));
    EXPECT_LE(relative_error(loss, expected.detach()), 1e-6);
    loss.backward(upstream);
    EXPECT_LE(relative_error(part.grad(), whole.grad().narrow(1, mine.start, mine.length)), 1e-6);
  });
}

TEST(VocabParallelCrossEntropy, EqualsTheWholeCrossEntropyAndItsGradient) {
  for (auto reduction : {accelerate::LossReduction::kMean, accelerate::LossReduction::kSum,
                         accelerate::LossReduction::kNone}) {
    expect_loss_matches(2, 16, reduction);
    expect_loss_matches(4, 11, reduction);  // parts of 3, 3, 3 and 2 classes
  }
}

TEST(VocabParallelCrossEntropy, AColwiseHeadAndTheSplitLossEqualTheWholeHeadAndLoss) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    Draws draw(9);
    const auto head = draw({10, 6}), hidden0 = draw({8, 6});
    const auto targets = at::randint(10, {8}, draw.generator, at::kLong);
    auto hidden = hidden0.clone().requires_grad_();
    auto w = head.clone().requires_grad_();
    torch::nn::functional::cross_entropy(torch::linear(hidden, w), targets).backward();

    ParallelLinear lm_head(torch::nn::LinearOptions(6, 10).bias(false));
    {
      torch::NoGradGuard no_grad;
      lm_head->weight.copy_(head);
    }
    lm_head->parallelize(TensorParallelStyle::kColwise, tp);
    auto hidden_split = hidden0.clone().requires_grad_();
    auto logits_part = lm_head(hidden_split);
    EXPECT_EQ(logits_part.size(1), 5);  // never the whole vocabulary here
    accelerate::vocab_parallel_cross_entropy(logits_part, targets, 10, tp).backward();
    EXPECT_LE(relative_error(hidden_split.grad(), hidden.grad()), 1e-6);
    EXPECT_LE(relative_error(lm_head->weight.grad(), w.grad().narrow(0, 5 * tp.rank(), 5)), 1e-6);
  });
}

TEST(TensorParallelLayers, APairMovesOneAllReduceOfItsActivationsEachWay) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    const PairCase c = pair_case(12, 32);
    // What one all-reduce of the pair's activations [2, 8, 12] moves here.
    comm->reset_traffic();
    auto activations = c.x.clone();
    comm->all_reduce(activations, accelerate::ReduceOp::kSum);
    const accelerate::TrafficCount one = accelerate::total(comm->traffic());
    comm->reset_traffic();
    split_pair(c, tp, /*sequence_parallel=*/false);
    const auto traffic = comm->traffic();
    ASSERT_FALSE(traffic.empty());
    const accelerate::TrafficCount all = accelerate::total(traffic);
    const accelerate::TrafficCount reduces = traffic[0].of(accelerate::TrafficKind::kAllReduce);
    EXPECT_EQ(reduces.collectives, 2u);  // forward after down, backward before up
    EXPECT_EQ(all.collectives, 2u);
    EXPECT_EQ(all.bytes_sent, 2 * one.bytes_sent);
    EXPECT_EQ(all.bytes_received, 2 * one.bytes_received);

    comm->reset_traffic();
    split_pair(c, tp, /*sequence_parallel=*/true);
    const auto with_sequence = comm->traffic();
    // Forward: all-gather before up, reduce-scatter after down; backward the
    // reverse; plus the scatter/gather the test wraps around the pair, and
    // one all-reduce of down's bias gradient.
    EXPECT_EQ(with_sequence[0].of(accelerate::TrafficKind::kReduceScatter).collectives, 2u);
    EXPECT_EQ(with_sequence[0].of(accelerate::TrafficKind::kAllReduce).collectives, 1u);
  });
}

// `body` on every rank of a 2-rank group throws accelerate::Error (or
// ConfigError) whose message contains `words`, and no rank hangs.
void expect_refused(const std::function<void(const TensorParallel&)>& body,
                    const std::string& words) {
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    try {
      body(tp);
      ADD_FAILURE() << "not refused: " << words;
    } catch (const accelerate::Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(words), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  });
}

TEST(TensorParallelLayers, WhatCannotBeSplitIsRefusedInOneLineOnEveryRank) {
  expect_refused(
      [](const TensorParallel& tp) {
        ParallelLinear layer(4, 5);
        layer->parallelize(TensorParallelStyle::kColwiseRep, tp);
      },
      "ParallelLinear (colwise_rep, tp 2): 5 output features are not divisible by tp_size 2");
  expect_refused(
      [](const TensorParallel& tp) {
        ParallelLinear layer(4, 6);
        layer->parallelize(TensorParallelStyle::kColwise, tp);
        layer->parallelize(TensorParallelStyle::kRowwise, tp);
      },
      "ParallelLinear (colwise, tp 2): already split");
  expect_refused(
      [](const TensorParallel& tp) {
        ParallelLinear layer(6, 4);
        layer->parallelize(TensorParallelStyle::kRowwise, tp);
        layer(torch::ones({2, 5}));
      },
      "ParallelLinear (rowwise, tp 2): the input has 5 features, not this rank's 3 or the whole 6");
  expect_refused(
      [](const TensorParallel& tp) {
        ParallelLinear layer(1, 4);
        layer->parallelize(TensorParallelStyle::kRowwise, tp);
      },
      "1 input features cannot be split over tp_size 2");
  expect_refused(
      [](const TensorParallel& tp) {
        ParallelEmbedding embedding(8, 2);
        embedding->parallelize(TensorParallelStyle::kColwise, tp);
      },
      "ParallelEmbedding: an embedding splits by vocabulary (rowwise) or not at all (replicate), "
      "not colwise");
  expect_refused(
      [](const TensorParallel& tp) {
        ParallelEmbedding embedding(8, 2);
        embedding->parallelize(TensorParallelStyle::kRowwise, tp);
        embedding(torch::tensor({1, 8}));
      },
      "ParallelEmbedding (rowwise, tp 2): id 8 is outside the 8 embeddings");
  expect_refused(
      [](const TensorParallel& tp) {
        accelerate::vocab_parallel_cross_entropy(torch::zeros({2, 3}), torch::tensor({0, 6}), 6,
                                                 tp);
      },
      "vocab_parallel_cross_entropy (tp 2): target 6 is outside the 6 classes");
  expect_refused(
      [](const TensorParallel& tp) {
        accelerate::vocab_parallel_cross_entropy(torch::zeros({2, 6}), torch::tensor({0, 1}), 6,
                                                 tp);
      },
      "this rank's logits have 6 classes, but its part of 6 is 3");
  expect_refused(
      [](const TensorParallel& tp) {
        accelerate::scatter_tokens(torch::zeros({1, 3, 2}), tp);
      },
      "scatter_tokens: 3 tokens are not divisible by tp_size 2");
}

}  // namespace tensor_parallel_test
