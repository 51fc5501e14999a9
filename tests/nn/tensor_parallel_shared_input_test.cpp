// Colwise layers that share one input collective (attention's q, k and v,
// an MLP's gate and up): the same results and gradients as each layer
// moving its own copy, with one collective each way in place of one per
// layer; and the vocab-parallel embedding under sequence parallelism. Real
// ranks: threads over a FileStore, Gloo.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "accelerate/distributed/communication_traffic.h"
#include "accelerate/distributed/communicator.h"
#include "accelerate/nn/parallel_layers.h"
#include "accelerate/nn/tensor_parallel.h"
#include "accelerate/precision/autocast.h"
#include "support/error_message.h"
#include "support/tensor_compare.h"
#include "support/thread_ranks.h"

namespace tensor_parallel_shared_input_test {

using accelerate::Communicator;
using accelerate::ParallelLinear;
using accelerate::TensorParallel;
using accelerate::TensorParallelStyle;
using accelerate::TrafficKind;
using accelerate::testing::Draws;
using accelerate::testing::relative_error;
using accelerate::testing::run_rank_communicators;

// Three colwise layers on one input [2, 8, 12] (its tokens split under
// sequence parallelism), each layer's sum of squares added up.
struct ThreeColwise {
  std::vector<ParallelLinear> layers;
  torch::Tensor x;

  ThreeColwise(const TensorParallel& tp, bool sequence_parallel) {
    Draws draw(21);
    x = draw({2, 8, 12});
    for (int64_t out : {8, 4, 4}) {
      ParallelLinear layer(12, out);
      torch::NoGradGuard no_grad;
      layer->weight.copy_(draw({out, 12}));
      layer->bias.copy_(draw({out}));
      layer->parallelize(TensorParallelStyle::kColwise, tp, sequence_parallel);
      layers.push_back(layer);
    }
    if (sequence_parallel) x = accelerate::scatter_tokens(x, tp);
    x = x.detach().requires_grad_();
  }

  // The sum of squares of the layers' results, this rank's part of it (the
  // split results are each rank's features).
  torch::Tensor loss(bool shared) {
    std::vector<torch::Tensor> results;
    if (shared) {
      results = accelerate::forward_sharing_input(x, layers);
    } else {
      for (auto& layer : layers) results.push_back(layer(x));
    }
    torch::Tensor sum = torch::zeros({});
    for (const auto& y : results) sum = sum + y.pow(2).sum();
    return sum;
  }
};

TEST(TensorParallelSharedInput, SharingLayersGiveTheSameGradientsWithOneCollectiveEachWay) {
  for (bool sequence_parallel : {false, true}) {
    run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
      const TensorParallel tp(comm);
      ThreeColwise separate(tp, sequence_parallel), shared(tp, sequence_parallel);
      separate.loss(/*shared=*/false).backward();
      comm->reset_traffic();
      shared.loss(/*shared=*/true).backward();
      const accelerate::GroupTraffic moved = comm->traffic().at(0);
      const std::string where = std::string(sequence_parallel ? "sequence parallel" : "plain") +
                                ", rank " + std::to_string(comm->rank());
      if (sequence_parallel) {
        // Forward: one gather of the tokens; backward: one gather again (for
        // the weights' gradients) and one reduce-scatter.
        EXPECT_EQ(moved.of(TrafficKind::kAllGather).collectives, 2u) << where;
        EXPECT_EQ(moved.of(TrafficKind::kReduceScatter).collectives, 1u) << where;
        EXPECT_EQ(moved.total().collectives, 3u) << where;
      } else {
        // Forward nothing; backward one all-reduce of x's gradient.
        EXPECT_EQ(moved.of(TrafficKind::kAllReduce).collectives, 1u) << where;
        EXPECT_EQ(moved.total().collectives, 1u) << where;
      }
      EXPECT_LE(relative_error(shared.x.grad(), separate.x.grad()), 1e-6) << where;
      for (size_t i = 0; i < shared.layers.size(); ++i) {
        EXPECT_TRUE(
            torch::equal(shared.layers[i]->weight.grad(), separate.layers[i]->weight.grad()))
            << where << ", layer " << i;
      }
    });
  }
}

TEST(TensorParallelSharedInput, UnderBf16AutocastTheGatheredProductsAreBf16AndGradientsFloat) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    ThreeColwise gathered(tp, /*sequence_parallel=*/true), plain(tp, false);
    accelerate::AutocastGuard autocast(c10::kCPU, at::kBFloat16,
                                       accelerate::AutocastOptions().cache_enabled(false));
    for (ThreeColwise* three : {&gathered, &plain}) {
      const auto products = accelerate::forward_sharing_input(three->x, three->layers);
      EXPECT_EQ(products[0].scalar_type(), at::kBFloat16) << "autocast casts the products";
      torch::Tensor sum = torch::zeros({});
      for (const auto& y : products) sum = sum + y.to(at::kFloat).pow(2).sum();
      sum.backward();
    }
    EXPECT_EQ(gathered.x.grad().scalar_type(), at::kFloat);
    for (size_t i = 0; i < gathered.layers.size(); ++i) {
      const torch::Tensor& grad = gathered.layers[i]->weight.grad();
      EXPECT_EQ(grad.scalar_type(), at::kFloat);
      // Both over every token, in bf16 products: alike to bf16 rounding.
      EXPECT_LE(relative_error(grad, plain.layers[i]->weight.grad()), 2e-2) << "layer " << i;
    }
  });
}

TEST(TensorParallelSharedInput, LayersSplitUnlikeEachMoveTheirOwnInput) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    ThreeColwise separate(tp, false), mixed(tp, false);
    // A whole layer among colwise ones: a shared f would count its input
    // gradient tp times.
    Draws draw(3);
    const torch::Tensor weight = draw({4, 12}), bias = draw({4});
    for (ThreeColwise* three : {&separate, &mixed}) {
      three->layers[1] = ParallelLinear(12, 4);
      torch::NoGradGuard no_grad;
      three->layers[1]->weight.copy_(weight);
      three->layers[1]->bias.copy_(bias);
    }
    separate.loss(false).backward();
    comm->reset_traffic();
    mixed.loss(true).backward();
    EXPECT_EQ(comm->traffic().at(0).of(TrafficKind::kAllReduce).collectives, 2u);
    EXPECT_LE(relative_error(mixed.x.grad(), separate.x.grad()), 1e-6);
  });
  ThreeColwise whole(TensorParallel(), false);
  EXPECT_TRUE(torch::equal(whole.loss(true), whole.loss(false)));
}

TEST(TensorParallelSharedInput, AnInputOfAnotherWidthIsRefusedBeforeAnyMessage) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    ThreeColwise three(TensorParallel(comm), false);
    EXPECT_EQ(accelerate::testing::error_of([&] {
                accelerate::forward_sharing_input(torch::ones({2, 8, 5}), three.layers);
              }),
              "ParallelLinear (colwise, tp 2): the input has 5 features, not 12");
  });
}

TEST(TensorParallelSharedInput, ASequenceParallelEmbeddingGivesEachRankItsTokens) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    Draws draw(5);
    const torch::Tensor whole = draw({11, 6}), upstream = draw({3, 8, 6});
    const torch::Tensor ids = at::randint(11, {3, 8}, draw.generator, at::kLong);
    auto w = whole.clone().requires_grad_();
    torch::embedding(w, ids).backward(upstream);
    accelerate::ParallelEmbedding embedding(11, 6);
    {
      torch::NoGradGuard no_grad;
      embedding->weight.copy_(whole);
    }
    embedding->parallelize(TensorParallelStyle::kRowwise, tp, /*sequence_parallel=*/true);
    const torch::Tensor mine = embedding(ids);
    EXPECT_TRUE(torch::equal(mine, torch::embedding(whole, ids).narrow(1, 4 * tp.rank(), 4)));
    mine.backward(upstream.narrow(1, 4 * tp.rank(), 4));
    const auto rows = embedding->vocabulary_range();
    EXPECT_LE(relative_error(embedding->weight.grad(), w.grad().narrow(0, rows.start, rows.length)),
              1e-6);
    EXPECT_EQ(accelerate::testing::error_of([&] { embedding(ids.narrow(1, 0, 7)); }),
              "reduce_scatter_tokens: 7 tokens are not divisible by tp_size 2");
  });
}

}  // namespace tensor_parallel_shared_input_test
