// GPT-2 under ZeRO stage 3: its blocks run through unit_forward, so
// prepare() makes each one a unit whose parameters hold memory only while
// it runs, and training is bitwise the same as under data parallelism, with
// activation checkpointing too. Ranks are threads with real collectives.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/accelerator.h"
#include "accelerate/models/gpt2.h"
#include "sharding/zero_test_support.h"

namespace gpt2_zero3_test {

namespace am = accelerate::models;

am::GPT2Config zero3_gpt2_config(bool tied) {
  am::GPT2Config config;
  config.vocab_size = 48;
  config.n_positions = 16;
  config.n_embd = 32;
  config.n_layer = 3;
  config.n_head = 4;
  config.n_inner = 40;
  // The threads share one CPU generator: no dropout.
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0;
  config.tie_word_embeddings = tied;
  return config;
}

struct Gpt2Trained {
  std::vector<at::Tensor> weights;
  bool blocks_released = false;
};

// Three steps of AdamW on each rank's own token ids, from `initial`.
Gpt2Trained train_gpt2(std::shared_ptr<accelerate::Communicator> comm, int stage,
                       const std::vector<at::Tensor>& initial, bool tied, bool checkpointing) {
  accelerate::AcceleratorOptions options;
  if (stage > 0) {
    options.deepspeed_plugin(
        accelerate::DeepSpeedPlugin().zero_stage(stage).gradient_clipping(std::nullopt));
  }
  accelerate::Accelerator accelerator(comm, options);
  am::GPT2LMHeadModel model(zero3_gpt2_config(tied));
  {
    // The same start on every rank without the CPU generator the threads share.
    at::NoGradGuard no_grad;
    const auto parameters = model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(initial[i]);
  }
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(0.01));
  model->transformer->set_gradient_checkpointing(checkpointing);
  accelerator.prepare(model, optimizer);
  for (int step = 0; step < 3; ++step) {
    at::Tensor labels =
        (at::arange(16, at::kLong) * (3 + step) + 5 * comm->rank()).remainder(48).reshape({2, 8});
    const at::Tensor ids = labels.clone();
    labels[1][3] = -100;
    accelerator.backward(model->loss(ids, labels));
    optimizer.step();
    optimizer.zero_grad();
  }
  Gpt2Trained out;
  out.blocks_released = accelerate::testing::all_released(model->transformer->h->parameters());
  out.weights = accelerate::testing::whole_weights(accelerator, *model);
  return out;
}

TEST(GPT2Zero3, BlocksAreUnitsAndTrainingMatchesDataParallelism) {
  for (const bool tied : {true, false}) {
    torch::manual_seed(23);
    std::vector<at::Tensor> initial;
    for (const auto& p : am::GPT2LMHeadModel(zero3_gpt2_config(tied))->parameters()) {
      initial.push_back(p.detach().clone());
    }
    auto run = [&](int stage, bool checkpointing) {
      return accelerate::testing::on_each_rank<Gpt2Trained>(
          2, [&](std::shared_ptr<accelerate::Communicator> comm) {
            return train_gpt2(std::move(comm), stage, initial, tied, checkpointing);
          });
    };
    const auto data_parallel = run(0, false);
    EXPECT_FALSE(at::allclose(data_parallel[0].weights[0], initial[0]))
        << "training did not move the weights: the comparison would prove nothing";
    // Units, and units with activation checkpointing: the same weights.
    for (const bool checkpointing : {false, true}) {
      const auto sharded = run(3, checkpointing);
      ASSERT_EQ(sharded[0].weights.size(), initial.size());
      for (int rank = 0; rank < 2; ++rank) {
        EXPECT_TRUE(sharded[rank].blocks_released) << "rank " << rank;
        EXPECT_FALSE(data_parallel[rank].blocks_released) << "rank " << rank;
        for (size_t i = 0; i < initial.size(); ++i) {
          EXPECT_TRUE(at::equal(sharded[rank].weights[i], data_parallel[rank].weights[i]))
              << "tied " << tied << ", checkpointing " << checkpointing << ", rank " << rank
              << ", weight " << i << ": max difference "
              << (sharded[rank].weights[i] - data_parallel[rank].weights[i])
                     .abs()
                     .max()
                     .item<double>();
        }
      }
    }
  }
}

}  // namespace gpt2_zero3_test
