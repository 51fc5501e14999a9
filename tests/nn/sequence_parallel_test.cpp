// Sequence parallelism's pieces on real ranks (threads over a FileStore,
// Gloo): Ulysses attention forward and backward with the sequence split
// over 2 and 4 ranks against the unsplit computation (fp32, bf16, under
// activation checkpointing), the token-weighted loss against the unsplit
// token mean (uneven valid tokens, a rank with none), the batch slicing and
// the one-line errors for indivisible heads or tokens.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/memory/activation_checkpointing.h"
#include "accelerate/nn/attention.h"
#include "accelerate/nn/sequence_parallel.h"
#include "support/thread_ranks.h"

namespace {

using accelerate::SequenceParallel;
using accelerate::testing::run_rank_communicators;

// max |a - b| / max |b|: the relative error of a whole tensor.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>() /
         (scale > 0 ? scale : 1.0);
}

struct AttentionCase {
  torch::Tensor q, k, v, upstream;  // whole sequence, [B, H, T, D]
};

AttentionCase attention_case(torch::ScalarType dtype) {
  // Every rank draws the same tensors, from its own generator (the default
  // one is shared by the rank threads).
  auto generator = at::detail::createCPUGenerator(7);
  const std::vector<int64_t> shape = {2, 4, 16, 8};
  auto draw = [&] { return at::randn(shape, generator).to(dtype); };
  return {draw(), draw(), draw(), draw()};
}

// Output and q, k, v gradients of the unsplit attention, computed in
// `head_groups` calls of equal head counts (as the ranks compute it).
std::vector<torch::Tensor> unsplit_attention(const AttentionCase& c, int64_t head_groups = 1) {
  auto q = c.q.clone().requires_grad_(), k = c.k.clone().requires_grad_(),
       v = c.v.clone().requires_grad_();
  std::vector<torch::Tensor> parts;
  for (int64_t g = 0, n = c.q.size(1) / head_groups; g < head_groups; ++g) {
    parts.push_back(accelerate::causal_attention(q.narrow(1, g * n, n), k.narrow(1, g * n, n),
                                                 v.narrow(1, g * n, n)));
  }
  auto y = torch::cat(parts, 1);
  y.backward(c.upstream);
  return {y.detach(), q.grad(), k.grad(), v.grad()};
}

// The same on this rank's slice of the tokens, through ulysses_attention
// (optionally under activation checkpointing, whose recomputation calls the
// all-to-alls again); returned as this rank's slices.
std::vector<torch::Tensor> split_attention(const AttentionCase& c, const SequenceParallel& sp,
                                           bool checkpointed) {
  const int64_t t = c.q.size(2) / sp.size(), from = sp.rank() * t;
  auto mine = [&](const torch::Tensor& x) { return x.narrow(2, from, t).clone(); };
  auto q = mine(c.q).requires_grad_(), k = mine(c.k).requires_grad_(),
       v = mine(c.v).requires_grad_();
  torch::Tensor y;
  if (checkpointed) {
    y = accelerate::checkpoint_function(
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{accelerate::ulysses_attention(in[0], in[1], in[2], sp)};
        },
        {q, k, v}, {})[0];
  } else {
    y = accelerate::ulysses_attention(q, k, v, sp);
  }
  y.backward(mine(c.upstream));
  return {y.detach(), q.grad(), k.grad(), v.grad()};
}

// Largest relative error, over the output and the three gradients and all
// ranks' slices, of the split attention against `reference_dtype`'s unsplit
// one on the same (dtype-rounded) inputs, computed in `head_groups` calls.
double worst_split_error(int world, torch::ScalarType dtype, bool checkpointed,
                         torch::ScalarType reference_dtype, int64_t head_groups = 1) {
  std::vector<double> errors(world, 0.0);
  run_rank_communicators(world, [&](std::shared_ptr<accelerate::Communicator> comm) {
    const SequenceParallel sp(comm);
    const AttentionCase c = attention_case(dtype);
    const auto whole = unsplit_attention({c.q.to(reference_dtype), c.k.to(reference_dtype),
                                          c.v.to(reference_dtype), c.upstream.to(reference_dtype)},
                                         head_groups);
    const auto split = split_attention(c, sp, checkpointed);
    const int64_t t = c.q.size(2) / sp.size();
    double worst = 0;
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_EQ(split[i].scalar_type(), dtype);
      worst = std::max(worst,
                       relative_error(split[i], whole[i].narrow(2, sp.rank() * t, t).contiguous()));
    }
    errors[comm->rank()] = worst;
  });
  return *std::max_element(errors.begin(), errors.end());
}

double worst_split_error(int world, torch::ScalarType dtype, bool checkpointed) {
  return worst_split_error(world, dtype, checkpointed, dtype);
}

TEST(UlyssesAttention, SplitOverTwoAndFourRanksEqualsTheUnsplitForwardAndBackward) {
  for (int world : {2, 4}) {
    EXPECT_LE(worst_split_error(world, torch::kFloat, false), 1e-6) << "sp " << world;
  }
}

TEST(UlyssesAttention, Bf16SplitEqualsTheUnsplitBf16OverTheSameHeadGroups) {
  // The all-to-alls move bf16 bits unchanged, so the split run equals the
  // unsplit bf16 attention computed over the same head groups (sp calls of
  // H/sp heads). LibTorch's CPU bf16 kernels round differently for other
  // head counts per call: against fp64 on the same bf16 inputs, the split
  // run's error is at most 4x the unsplit (one call) bf16 run's.
  for (int world : {2, 4}) {
    EXPECT_LE(worst_split_error(world, torch::kBFloat16, false, torch::kBFloat16, world), 1e-6)
        << "sp " << world;
    const double split = worst_split_error(world, torch::kBFloat16, false, torch::kDouble);
    const double whole = worst_split_error(1, torch::kBFloat16, false, torch::kDouble);
    std::cout << "bf16 sp " << world << ": relative error against fp64 " << split
              << " (unsplit bf16: " << whole << ")\n";
    EXPECT_LE(split, 4 * whole) << "sp " << world;
  }
}

TEST(UlyssesAttention, WorksUnderActivationCheckpointing) {
  EXPECT_LE(worst_split_error(2, torch::kFloat, true), 1e-6);
}

TEST(UlyssesAttention, IndivisibleHeadsOrTokensAreOneLineErrorsNamingBothNumbers) {
  run_rank_communicators(2, [](std::shared_ptr<accelerate::Communicator> comm) {
    const SequenceParallel sp(comm);
    const auto x = torch::zeros({1, 3, 4, 8});
    try {
      accelerate::ulysses_attention(x, x, x, sp);
      ADD_FAILURE() << "3 heads over 2 ranks ran";
    } catch (const accelerate::Error& error) {
      EXPECT_EQ(std::string(error.what()),
                "ulysses_attention: 3 heads are not divisible by sp_size 2");
    }
    try {
      accelerate::slice_sequence(torch::zeros({1, 7}, torch::kLong), sp);
      ADD_FAILURE() << "7 tokens over 2 ranks sliced";
    } catch (const accelerate::Error& error) {
      EXPECT_EQ(std::string(error.what()),
                "slice_sequence: 7 tokens are not divisible by sp_size 2");
    }
  });
}

TEST(SequenceSlicing, LabelsAreShiftedBeforeTheSplitAndPositionsOffset) {
  run_rank_communicators(2, [](std::shared_ptr<accelerate::Communicator> comm) {
    const SequenceParallel sp(comm);
    const auto ids = torch::arange(10, 18, torch::kLong).reshape({1, 8});
    auto labels = ids.clone();
    labels[0][2] = -100;  // e.g. padding: no loss for predicting it
    const auto slice = accelerate::slice_sequence(ids, sp, labels);
    const int64_t r = sp.rank();
    EXPECT_EQ(slice.offset, 4 * r);
    EXPECT_TRUE(slice.input_ids.equal(ids.narrow(1, 4 * r, 4)));
    EXPECT_TRUE(slice.position_ids.equal(torch::arange(4 * r, 4 * r + 4, torch::kLong)));
    // Rank 0's last label is rank 1's first token; rank 1's last has none.
    const auto expected =
        r == 0 ? std::vector<int64_t>{11, -100, 13, 14} : std::vector<int64_t>{15, 16, 17, -100};
    EXPECT_TRUE(slice.labels.equal(torch::tensor(expected).reshape({1, 4})))
        << "rank " << r << ": " << slice.labels;
  });
}

// A tiny "model": logits = x W for a weight every rank holds alike; the loss
// is the token-mean cross entropy over the labels that are not -100.
struct LossCase {
  torch::Tensor x, labels, weight;  // x [B, T, 6], labels [B, T], weight [6, 5]
};

LossCase loss_case(bool second_half_unlabelled) {
  auto generator = at::detail::createCPUGenerator(3);
  LossCase c{at::randn({2, 8, 6}, generator), at::randint(0, 5, {2, 8}, generator),
             at::randn({6, 5}, generator)};
  // Uneven valid tokens: some ignored in the first half ...
  c.labels[0][1] = -100;
  c.labels[1][0] = -100;
  c.labels[1][3] = -100;
  // ... and optionally none at all in the second half (rank 1 of 2).
  if (second_half_unlabelled) c.labels.narrow(1, 4, 4).fill_(-100);
  return c;
}

// Loss and weight gradient of the unsplit token mean.
std::pair<torch::Tensor, torch::Tensor> unsplit_loss(const LossCase& c) {
  auto w = c.weight.clone().requires_grad_();
  auto loss = torch::nn::functional::cross_entropy(
      torch::matmul(c.x, w).reshape({-1, 5}), c.labels.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
  loss.backward();
  return {loss.detach(), w.grad()};
}

void expect_split_loss_equals_unsplit(int world, bool second_half_unlabelled) {
  run_rank_communicators(world, [&](std::shared_ptr<accelerate::Communicator> comm) {
    const SequenceParallel sp(comm);
    const LossCase c = loss_case(second_half_unlabelled);
    const auto [expected_loss, expected_grad] = unsplit_loss(c);
    auto w = c.weight.clone().requires_grad_();
    const auto x = accelerate::slice_tokens(c.x, sp);
    const auto labels = accelerate::slice_tokens(c.labels, sp);
    const auto sum = torch::nn::functional::cross_entropy(
        torch::matmul(x, w).reshape({-1, 5}), labels.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
    const auto loss = accelerate::sequence_parallel_loss(sum, (labels != -100).sum(), sp);
    EXPECT_FALSE(loss.isnan().item<bool>());
    EXPECT_LE(relative_error(loss.detach(), expected_loss), 1e-6) << "rank " << sp.rank();
    loss.backward();
    // What the engines do: average the gradients over every rank.
    auto grad = w.grad().clone();
    comm->all_reduce(grad, accelerate::ReduceOp::kMean);
    EXPECT_LE(relative_error(grad, expected_grad), 1e-6) << "rank " << sp.rank();
  });
}

TEST(SequenceParallelLoss, EqualsTheUnsplitTokenMeanWithUnevenValidTokens) {
  expect_split_loss_equals_unsplit(2, false);
  expect_split_loss_equals_unsplit(4, false);
}

TEST(SequenceParallelLoss, ARankWithNoValidTokenContributesNothingAndNoNaN) {
  expect_split_loss_equals_unsplit(2, true);
}

TEST(SequenceParallelLoss, AGroupWithNoValidTokenGivesZero) {
  run_rank_communicators(2, [](std::shared_ptr<accelerate::Communicator> comm) {
    const SequenceParallel sp(comm);
    const auto sum = torch::zeros({}, torch::requires_grad());
    const auto loss = accelerate::sequence_parallel_loss(sum, torch::zeros({}, torch::kLong), sp);
    EXPECT_EQ(loss.item<double>(), 0.0);
    loss.backward();
    EXPECT_FALSE(sum.grad().isnan().item<bool>());
  });
}

}  // namespace
