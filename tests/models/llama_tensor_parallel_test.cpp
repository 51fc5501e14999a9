// The Llama family split by its tensor-parallel plan on real ranks (threads
// over a FileStore, Gloo): transformers' tiny models at tp 2 give
// transformers' logits, loss and gradients (each rank's parts of them); 50
// AdamW steps at tp 2 follow tp 1's losses; tp 2 x Ulysses sp 2 on four
// ranks equals the unsplit model; all of it again with Megatron's sequence
// parallelism; a block's traffic is the formula's; sizes the plan cannot
// split are refused in one line on every rank. Without the reference interpreter the transformers
// tests report themselves skipped.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/communication_traffic.h"
#include "accelerate/models/llama.h"
#include "accelerate/nn/tensor_parallel.h"
#include "reference_python.h"
#include "support/error_message.h"
#include "support/temp_dir.h"
#include "support/tensor_compare.h"
#include "support/thread_ranks.h"
#include "tensor_parallel_steps.h"
#include "tiny_llama_config.h"

namespace llama_tensor_parallel_test {

namespace am = accelerate::models;
using accelerate::Communicator;
using accelerate::TensorParallel;
using accelerate::testing::run_rank_communicators;

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-12);
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / scale;
}

using accelerate::testing::tensor_parallel_part_of;

// ---- Against transformers -------------------------------------------------

std::map<std::string, at::Tensor> reference_outputs(const std::string& variant) {
  return accelerate::testing::load_named_tensors(
      accelerate::testing::reference_folder(LLAMA_REFERENCE_SCRIPT) + "/" + variant +
      "/reference.safetensors");
}

am::LlamaForCausalLM reference_model(const std::string& variant) {
  return am::LlamaForCausalLM(am::LlamaForCausalLMImpl::from_pretrained(
      accelerate::testing::reference_folder(LLAMA_REFERENCE_SCRIPT) + "/" + variant + "/model"));
}

// At tp 2: logits within 1e-5 of transformers' on every rank, the loss
// within 1e-4 relative, and each rank's part of every gradient within 1e-4
// of the same part of transformers' (the tests of the whole model's bounds).
// With `sequence_parallel`, Megatron's: the norms' gradients, each rank's
// from its own tokens, must be summed over the group to be transformers'.
void expect_split_matches_transformers(const std::string& variant, bool sequence_parallel) {
  ASSERT_FALSE(accelerate::testing::reference_folder(LLAMA_REFERENCE_SCRIPT).empty());
  const auto reference = reference_outputs(variant);
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
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
      EXPECT_LE(accelerate::testing::max_abs_diff(grad, tensor_parallel_part_of(whole, grad, tp)),
                1e-4 * whole.abs().max().item<double>())
          << variant << " " << item.key() << ", rank " << tp.rank();
    }
    EXPECT_GE(split, 7 * 2) << "the plan split each layer's seven projections";
  });
}

TEST(LlamaTensorParallel, Tp2EqualsTransformersPlain) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("plain", /*sequence_parallel=*/false);
}

TEST(LlamaTensorParallel, Tp2SequenceParallelEqualsTransformersPlain) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("plain", /*sequence_parallel=*/true);
}

TEST(LlamaTensorParallel, Tp2EqualsTransformersTiedWithLlama3Rope) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("llama3_tied", /*sequence_parallel=*/false);
}

TEST(LlamaTensorParallel, Tp2SequenceParallelEqualsTransformersTiedWithLlama3Rope) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("llama3_tied", /*sequence_parallel=*/true);
}

TEST(LlamaTensorParallel, Tp2EqualsTransformersWithBiases) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("sharded", /*sequence_parallel=*/false);
}

TEST(LlamaTensorParallel, Tp2SequenceParallelEqualsTransformersWithBiases) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("sharded", /*sequence_parallel=*/true);
}

TEST(LlamaTensorParallel, Tp2EqualsTransformersQwen2) {
  REQUIRE_REFERENCE_PYTHON();
  expect_split_matches_transformers("qwen2_window", /*sequence_parallel=*/false);
}

// ---- Training ---------------------------------------------------------------

constexpr int64_t kVocab = 48, kTokens = 16;

am::LlamaConfig tiny_config() { return accelerate::testing::tiny_llama_config(kVocab, kTokens); }

std::vector<at::Tensor> initial_parameters() {
  return accelerate::testing::initial_parameters_of(
      [] { return am::LlamaForCausalLM(tiny_config()); }, 21);
}

am::LlamaForCausalLM model_from(const std::vector<at::Tensor>& initial) {
  return accelerate::testing::model_with([] { return am::LlamaForCausalLM(tiny_config()); },
                                         initial);
}

at::Tensor batch(int step) { return accelerate::testing::step_batch(step, kVocab, kTokens); }

std::vector<double> train(am::LlamaForCausalLM& model) {
  return accelerate::testing::adamw_losses(model, 1e-2, 50, kVocab, kTokens);
}

TEST(LlamaTensorParallel, FiftyStepsAtTp2WithAndWithoutSequenceParallelFollowTp1sLosses) {
  const auto initial = initial_parameters();
  auto whole = model_from(initial);
  const std::vector<double> expected = train(whole);
  ASSERT_LT(expected.back(), 0.8 * expected.front()) << "the model learns";
  for (bool sequence_parallel : {false, true})
    run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
      auto model = model_from(initial);
      model->parallelize(TensorParallel(comm, sequence_parallel));
      // Memory: every parameter but the norms' is split, each rank holding half.
      int64_t norms = 0, held = 0, whole_numel = 0;
      for (const auto& item : whole->named_parameters()) {
        whole_numel += item.value().numel();
        if (item.key().find("norm") != std::string::npos) norms += item.value().numel();
      }
      for (const auto& p : model->parameters()) held += p.numel();
      EXPECT_EQ(held, norms + (whole_numel - norms) / 2);
      const std::vector<double> losses = train(model);
      for (size_t step = 0; step < losses.size(); ++step) {
        EXPECT_LE(std::abs(losses[step] - expected[step]), 1e-5 * expected[step])
            << "step " << step << ", rank " << comm->rank()
            << (sequence_parallel ? ", sequence parallel" : "");
      }
    });
}

TEST(LlamaTensorParallel, Tp2TimesSequenceParallel2EqualsTheUnsplitModel) {
  const auto initial = initial_parameters();
  auto whole = model_from(initial);
  const at::Tensor whole_loss = whole->loss(batch(0), batch(0));
  whole_loss.backward();
  const auto whole_parameters = whole->parameters();
  // Ulysses over sp, and tp with and without Megatron's sequence
  // parallelism (which splits each rank's slice again, over tp).
  for (bool megatron : {false, true})
    run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
      // tp innermost (ranks 0-1, 2-3), sp across (0-2, 1-3), as the mesh orders them.
      const auto tp_group = comm->split({{0, 1}, {2, 3}});
      const auto sp_group = comm->split({{0, 2}, {1, 3}});
      const TensorParallel tp(tp_group, megatron);
      auto model = model_from(initial);
      model->parallelize(tp);
      model->use_sequence_parallel(accelerate::SequenceParallel(sp_group));
      const at::Tensor loss = model->loss(batch(0), batch(0));
      EXPECT_NEAR(loss.item<double>(), whole_loss.item<double>(), 1e-6 * whole_loss.item<double>());
      loss.backward();
      // The data-parallel engines average over the sp ranks (which hold the
      // same parts): the same here.
      const auto parameters = model->parameters();
      for (size_t i = 0; i < parameters.size(); ++i) {
        at::Tensor mean = parameters[i].grad().clone();
        sp_group->all_reduce(mean, accelerate::ReduceOp::kSum);
        mean /= 2;
        EXPECT_LT(
            relative_error(mean, tensor_parallel_part_of(whole_parameters[i].grad(), mean, tp)),
            1e-5)
            << "parameter " << i << ", rank " << comm->rank();
      }
    });
}

// Bytes all-gathered by this process since the counters were reset.
uint64_t all_gathered_bytes(Communicator& comm) {
  uint64_t bytes = 0;
  for (const auto& group : comm.traffic()) {
    bytes += group.of(accelerate::TrafficKind::kAllGather).bytes_received;
  }
  return bytes;
}

TEST(LlamaTensorParallel, TheLossNeverGathersTheLogits) {
  const auto initial = initial_parameters();
  auto whole = model_from(initial);
  const double expected = whole->loss(batch(0), batch(0)).item<double>();
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    auto model = model_from(initial);
    model->parallelize(TensorParallel(comm));
    comm->reset_traffic();
    const at::Tensor loss = model->loss(batch(0), batch(0));
    loss.backward();
    // The vocab-parallel cross-entropy all-reduces three floats a token;
    // nothing in forward or backward is all-gathered.
    EXPECT_EQ(all_gathered_bytes(*comm), 0u) << "rank " << comm->rank();
    EXPECT_NEAR(loss.item<double>(), expected, 1e-5 * expected);
    comm->reset_traffic();
    at::NoGradGuard no_grad;
    const at::Tensor logits = model->forward(batch(0));
    ASSERT_EQ(logits.size(-1), kVocab) << "forward gives the whole logits";
    EXPECT_GE(all_gathered_bytes(*comm), static_cast<uint64_t>(logits.numel() / 2 * 4));
  });
}

// What `kind` moved in `with` beyond `without`.
accelerate::TrafficCount moved_beyond(const accelerate::GroupTraffic& with,
                                      const accelerate::GroupTraffic& without,
                                      accelerate::TrafficKind kind) {
  accelerate::TrafficCount more = with.of(kind);
  more.collectives -= without.of(kind).collectives;
  more.bytes_sent -= without.of(kind).bytes_sent;
  more.bytes_received -= without.of(kind).bytes_received;
  return more;
}

am::LlamaConfig config_with_layers(int64_t layers) {
  am::LlamaConfig config = tiny_config();
  config.num_hidden_layers = layers;
  return config;
}

// A block's traffic, counted: what a loss step of two decoder layers moves
// beyond one layer's, at tp 2. Activations [2, 16, 32] fp32 are S = 4096
// bytes; an all-reduce of them sends 2 (N-1)/N S = S per process at N = 2,
// an all-gather or reduce-scatter of them S/2 (docs/distributed.md).
TEST(LlamaTensorParallel, ABlockMovesTwoAllReducesEachWayOrTheirBytesAsGathersAndScatters) {
  std::vector<std::vector<at::Tensor>> initial;
  for (int64_t layers : {1, 2}) {
    initial.push_back(accelerate::testing::initial_parameters_of(
        [&] { return am::LlamaForCausalLM(config_with_layers(layers)); }, 5));
  }
  using accelerate::TrafficKind;
  constexpr uint64_t kActivationBytes = 2 * kTokens * 32 * 4;
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    for (bool sequence_parallel : {false, true}) {
      std::vector<accelerate::GroupTraffic> traffic;
      for (int64_t layers : {1, 2}) {
        auto model = accelerate::testing::model_with(
            [&] { return am::LlamaForCausalLM(config_with_layers(layers)); }, initial[layers - 1]);
        model->parallelize(TensorParallel(comm, sequence_parallel));
        comm->reset_traffic();
        model->loss(batch(0), batch(0)).backward();
        traffic.push_back(comm->traffic().at(0));
      }
      const auto reduces = moved_beyond(traffic[1], traffic[0], TrafficKind::kAllReduce);
      const auto gathers = moved_beyond(traffic[1], traffic[0], TrafficKind::kAllGather);
      const auto scatters = moved_beyond(traffic[1], traffic[0], TrafficKind::kReduceScatter);
      const std::string where = std::string(sequence_parallel ? "sequence parallel" : "plain") +
                                ", rank " + std::to_string(comm->rank());
      if (!sequence_parallel) {
        // Forward after o_proj and down_proj; backward before q/k/v (one for
        // the three) and before gate/up (one for the two).
        EXPECT_EQ(reduces.collectives, 4u) << where;
        EXPECT_EQ(reduces.bytes_sent, 4 * kActivationBytes) << where;
        EXPECT_EQ(gathers.collectives + scatters.collectives, 0u) << where;
        continue;
      }
      // Forward: a gather before q/k/v and gate/up, a reduce-scatter after
      // o_proj and down_proj; backward the reverse (the all-reduces' bytes),
      // and the two inputs gathered again for the weights' gradients
      // (Megatron's: the gathered inputs are not kept).
      EXPECT_EQ(gathers.collectives, 6u) << where;
      EXPECT_EQ(scatters.collectives, 4u) << where;
      EXPECT_EQ(gathers.bytes_sent + scatters.bytes_sent,
                4 * kActivationBytes + 2 * kActivationBytes / 2)
          << where;
      // And the two norms' weight gradients, summed over the group.
      EXPECT_EQ(reduces.collectives, 2u) << where;
      EXPECT_EQ(reduces.bytes_sent, 2u * 32 * 4) << where;
    }
  });
}

TEST(LlamaTensorParallel, SequenceParallelTokensTpCannotDivideAreRefusedInOneLine) {
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    am::LlamaForCausalLM model(tiny_config());
    model->parallelize(TensorParallel(comm, /*sequence_parallel=*/true));
    const at::Tensor odd = batch(0).narrow(1, 0, 15);
    EXPECT_EQ(accelerate::testing::error_of([&] { model->loss(odd, odd); }),
              "Llama: 15 tokens are not divisible by tp_size 2 (tp_sequence_parallel splits them "
              "between the layers)");
  });
}

TEST(LlamaTensorParallel, WhatThePlanCannotSplitIsRefusedInOneLineOnEveryRank) {
  run_rank_communicators(4, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    am::LlamaForCausalLM model(tiny_config());  // 2 key/value heads
    EXPECT_EQ(accelerate::testing::error_of([&] { model->parallelize(tp); }),
              "Llama: num_key_value_heads 2 is not divisible by tp_size 4");
    EXPECT_FALSE(model->tensor_parallel().enabled()) << "nothing was split";
  });
  run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    am::LlamaConfig odd = tiny_config();
    odd.vocab_size = 47;
    am::LlamaForCausalLM model(odd);
    EXPECT_EQ(accelerate::testing::error_of([&] { model->parallelize(tp); }),
              "Llama: vocab_size (the logits are gathered whole) 47 is not divisible by tp_size 2");
    am::LlamaForCausalLM split(tiny_config());
    split->parallelize(tp);
    EXPECT_EQ(accelerate::testing::error_of([&] { split->parallelize(tp); }),
              "Llama: the model is split over tp_size 2 already");
    accelerate::testing::TempDir dir;
    EXPECT_EQ(accelerate::testing::error_of([&] { split->save_pretrained(dir.path()); }),
              "Llama: save_pretrained of a model split over tp_size 2 would write parts of its "
              "tensors; save the model built whole");
  });
}

}  // namespace llama_tensor_parallel_test
