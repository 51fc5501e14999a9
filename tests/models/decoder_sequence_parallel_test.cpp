// The decoder models (GPT-2, and Llama with grouped-query attention and a
// sliding window) with their sequences split over a sequence-parallel group
// (Ulysses attention, the token-weighted loss), on real ranks (threads over
// a FileStore, Gloo): the loss and the rank-averaged gradients equal the
// unsplit model's, with labels shifted inside or given shifted; the
// indivisible heads or tokens errors on every rank; and on one process the
// shifted-labels loss, positions and their one-line errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/models/gpt2.h"
#include "accelerate/models/llama.h"
#include "support/error_message.h"
#include "support/thread_ranks.h"

namespace decoder_sequence_parallel_test {

namespace am = accelerate::models;
using accelerate::testing::error_of;

constexpr int64_t kVocab = 48, kTokens = 16;

struct Gpt2Family {
  using Model = am::GPT2LMHeadModel;
  static constexpr const char* kName = "GPT-2";
  static am::GPT2Config config() {
    am::GPT2Config c;
    c.vocab_size = kVocab, c.n_positions = kTokens, c.n_embd = 32, c.n_layer = 2, c.n_head = 4;
    // The rank threads share one CPU generator: no dropout.
    c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0;
    return c;
  }
};

struct LlamaFamily {
  using Model = am::LlamaForCausalLM;
  static constexpr const char* kName = "Llama";
  static am::LlamaConfig config() {
    am::LlamaConfig c;
    c.model_type = am::LlamaModelType::kMistral;
    c.vocab_size = kVocab, c.hidden_size = 32, c.intermediate_size = 48;
    c.num_hidden_layers = 2, c.num_attention_heads = 4, c.num_key_value_heads = 2;
    c.max_position_embeddings = kTokens;
    c.sliding_window = 6;  // narrower than a rank's slice on 2 ranks, wider on 4
    return c;
  }
};

at::Tensor sp_ids() {
  return (at::arange(2 * kTokens, at::kLong) * 7 + 3).remainder(kVocab).reshape({2, kTokens});
}

// Unevenly ignored tokens: the ranks' slices hold different counts.
at::Tensor sp_labels() {
  at::Tensor labels = sp_ids().clone();
  labels[0].narrow(0, 9, 7).fill_(-100);
  labels[1][2] = -100;
  return labels;
}

double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(b.abs().max().item<double>(), 1e-12);
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / scale;
}

// Whether the labels go in unshifted (loss) or shifted (loss_on_shifted_labels).
enum class Labels { kUnshifted, kShifted };

template <class Family>
typename Family::Model model_from(const std::vector<at::Tensor>& initial) {
  typename Family::Model model(Family::config());
  at::NoGradGuard no_grad;
  const auto parameters = model->parameters();
  for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(initial[i]);
  return model;
}

template <class Model>
at::Tensor model_loss(Model& model, Labels labels) {
  return labels == Labels::kUnshifted
             ? model->loss(sp_ids(), sp_labels())
             : model->loss_on_shifted_labels(sp_ids(), am::shift_causal_lm_labels(sp_labels()));
}

template <class Family>
void expect_split_equals_unsplit(int world, Labels labels) {
  torch::manual_seed(11);
  std::vector<at::Tensor> initial;
  for (const auto& p : typename Family::Model(Family::config())->parameters()) {
    initial.push_back(p.detach().clone());
  }
  auto whole = model_from<Family>(initial);
  const at::Tensor whole_loss = model_loss(whole, labels);
  whole_loss.backward();
  const auto whole_parameters = whole->parameters();
  accelerate::testing::run_rank_communicators(
      world, [&](std::shared_ptr<accelerate::Communicator> comm) {
        auto model = model_from<Family>(initial);
        model->use_sequence_parallel(accelerate::SequenceParallel(comm));
        const at::Tensor loss = model_loss(model, labels);
        EXPECT_NEAR(loss.item<double>(), whole_loss.item<double>(),
                    1e-6 * whole_loss.item<double>())
            << Family::kName << ", rank " << comm->rank();
        loss.backward();
        // The engines average gradients over every rank: do the same here.
        const auto parameters = model->parameters();
        for (size_t i = 0; i < parameters.size(); ++i) {
          at::Tensor mean = parameters[i].grad().clone();
          comm->all_reduce(mean, accelerate::ReduceOp::kSum);
          mean /= world;
          EXPECT_LT(relative_error(mean, whole_parameters[i].grad()), 1e-5)
              << Family::kName << ", parameter " << i << ", rank " << comm->rank() << " of "
              << world;
        }
      });
}

TEST(DecoderSequenceParallel, Gpt2OverTwoAndFourRanksEqualsTheUnsplitLossAndGradients) {
  for (int world : {2, 4}) expect_split_equals_unsplit<Gpt2Family>(world, Labels::kUnshifted);
  expect_split_equals_unsplit<Gpt2Family>(2, Labels::kShifted);
}

TEST(DecoderSequenceParallel, LlamaWithGroupedKeysAndASlidingWindowEqualsTheUnsplit) {
  for (int world : {2, 4}) expect_split_equals_unsplit<LlamaFamily>(world, Labels::kUnshifted);
  expect_split_equals_unsplit<LlamaFamily>(2, Labels::kShifted);
}

TEST(DecoderSequenceParallel, IndivisibleHeadsOrTokensAreOneLineErrorsOnEveryRank) {
  accelerate::testing::run_rank_communicators(
      3, [&](std::shared_ptr<accelerate::Communicator> comm) {
        const accelerate::SequenceParallel sp(comm);
        am::GPT2LMHeadModel gpt2(Gpt2Family::config());
        EXPECT_EQ(error_of([&] { gpt2->use_sequence_parallel(sp); }),
                  "GPT-2: n_head 4 is not divisible by sp_size 3");
        am::LlamaForCausalLM llama(LlamaFamily::config());
        EXPECT_EQ(error_of([&] { llama->use_sequence_parallel(sp); }),
                  "Llama: num_attention_heads 4 is not divisible by sp_size 3");
      });
  accelerate::testing::run_rank_communicators(
      2, [&](std::shared_ptr<accelerate::Communicator> comm) {
        am::GPT2LMHeadModel model(Gpt2Family::config());
        model->use_sequence_parallel(accelerate::SequenceParallel(comm));
        const at::Tensor odd = at::zeros({1, 15}, at::kLong);
        EXPECT_EQ(error_of([&] { model->loss_on_shifted_labels(odd, odd); }),
                  "slice_tokens: 15 tokens are not divisible by sp_size 2");
        EXPECT_EQ(error_of([&] { model->loss(odd, odd); }),
                  "slice_sequence: 15 tokens are not divisible by sp_size 2");
      });
}

TEST(DecoderLoss, ShiftedLabelsGiveTheLossOfLabelsShiftedInside) {
  torch::manual_seed(12);
  am::GPT2LMHeadModel gpt2(Gpt2Family::config());
  am::LlamaForCausalLM llama(LlamaFamily::config());
  const at::Tensor shifted = am::shift_causal_lm_labels(sp_labels());
  EXPECT_TRUE(at::equal(gpt2->loss(sp_ids(), sp_labels()),
                        gpt2->loss_on_shifted_labels(sp_ids(), shifted)));
  EXPECT_TRUE(at::equal(llama->loss(sp_ids(), sp_labels()),
                        llama->loss_on_shifted_labels(sp_ids(), shifted)));
  // A window and its next tokens: every position is predicted.
  const at::Tensor next = sp_ids().roll(-1, 1);
  EXPECT_TRUE(at::allclose(gpt2->loss_on_shifted_labels(sp_ids(), next),
                           am::shifted_causal_lm_loss(gpt2->forward(sp_ids()), next)));
  EXPECT_EQ(error_of([&] { am::shift_causal_lm_labels(at::zeros({4}, at::kLong)); }),
            "shift_causal_lm_labels: labels must be [batch, tokens], not [4]");
}

TEST(DecoderLoss, PositionsAreTheTokensPlacesAndBadOnesAreOneLineErrors) {
  torch::manual_seed(13);
  am::GPT2LMHeadModel gpt2(Gpt2Family::config());
  am::LlamaForCausalLM llama(LlamaFamily::config());
  // Explicit positions 0..T-1 are the default's.
  const at::Tensor positions = at::arange(kTokens, at::kLong);
  EXPECT_TRUE(at::equal(gpt2->forward(sp_ids(), positions), gpt2->forward(sp_ids())));
  EXPECT_TRUE(at::equal(llama->forward(sp_ids(), positions), llama->forward(sp_ids())));
  // Other positions change the output: GPT-2's embeddings are absolute;
  // Llama's rotations see only distances, so the spacing changes, and a
  // shift of all positions leaves it as it was up to rounding.
  const at::Tensor first_four = sp_ids().narrow(1, 0, 4);
  const at::Tensor spaced = at::arange(0, 8, 2, at::kLong);
  EXPECT_FALSE(at::allclose(gpt2->forward(first_four, spaced), gpt2->forward(first_four)));
  EXPECT_FALSE(at::allclose(llama->forward(first_four, spaced), llama->forward(first_four)));
  EXPECT_TRUE(at::allclose(llama->forward(first_four, at::arange(8, 12, at::kLong)),
                           llama->forward(first_four), 1e-4, 1e-5));

  EXPECT_EQ(error_of([&] { gpt2->forward(first_four, at::arange(13, 17, at::kLong)); }),
            "GPT-2: 17 tokens exceed n_positions 16");
  EXPECT_EQ(error_of([&] { gpt2->forward(first_four, at::arange(3, at::kLong)); }),
            "GPT-2: position_ids must be [4], not [3]");
  EXPECT_EQ(error_of([&] { llama->forward(first_four, at::arange(3, at::kLong)); }),
            "Llama: position_ids must be [4], not [3]");
  const at::Tensor long_ids = at::zeros({1, 17}, at::kLong);
  EXPECT_EQ(error_of([&] { gpt2->loss_on_shifted_labels(long_ids, long_ids); }),
            "GPT-2: 17 tokens exceed n_positions 16");
}

}  // namespace decoder_sequence_parallel_test
