// GPT-2 under ZeRO stage 3: its blocks run through unit_forward, so
// prepare() makes each one a unit whose parameters hold memory only while
// it runs, and training is bitwise the same as under data parallelism, with
// activation checkpointing too, and under FSDP with the blocks auto-wrapped
// by class name. Ranks are threads with real collectives.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/models/gpt2.h"
#include "accelerate/sharding/fsdp_plugin.h"
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

// How the model is spread over the ranks.
enum class Gpt2Sharding {
  kDataParallel,
  kZero3,     // DeepSpeed ZeRO stage 3: each unit_forward call is a unit
  kFsdpWrap,  // FSDP FULL_SHARD, auto-wrapped by class name "GPT2Block"
};

struct Gpt2Trained {
  std::vector<at::Tensor> weights;
  bool blocks_released = false;
};

// Three steps of AdamW on each rank's own token ids, from `initial`.
Gpt2Trained train_gpt2(std::shared_ptr<accelerate::Communicator> comm, Gpt2Sharding sharding,
                       const std::vector<at::Tensor>& initial, bool tied, bool checkpointing) {
  accelerate::AcceleratorOptions options;
  if (sharding == Gpt2Sharding::kZero3) {
    options.deepspeed_plugin(
        accelerate::DeepSpeedPlugin().zero_stage(3).gradient_clipping(std::nullopt));
  } else if (sharding == Gpt2Sharding::kFsdpWrap) {
    // transformers' _no_split_modules name: FSDP users write it in their configs.
    options.fsdp_plugin(accelerate::FullyShardedDataParallelPlugin()
                            .auto_wrap_policy(accelerate::FsdpAutoWrapPolicy::kTransformerBasedWrap)
                            .transformer_cls_names_to_wrap({"GPT2Block"}));
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

TEST(GPT2Zero3, BlocksAreUnitsAndTrainingMatchesDataParallelismZero3AndFsdpWrap) {
  for (const bool tied : {true, false}) {
    torch::manual_seed(23);
    std::vector<at::Tensor> initial;
    for (const auto& p : am::GPT2LMHeadModel(zero3_gpt2_config(tied))->parameters()) {
      initial.push_back(p.detach().clone());
    }
    auto run = [&](Gpt2Sharding sharding, bool checkpointing) {
      return accelerate::testing::on_each_rank<Gpt2Trained>(
          2, [&](std::shared_ptr<accelerate::Communicator> comm) {
            return train_gpt2(std::move(comm), sharding, initial, tied, checkpointing);
          });
    };
    const auto data_parallel = run(Gpt2Sharding::kDataParallel, false);
    EXPECT_FALSE(at::allclose(data_parallel[0].weights[0], initial[0]))
        << "training did not move the weights: the comparison would prove nothing";
    // ZeRO-3 units, with and without activation checkpointing, and FSDP's
    // auto-wrapped blocks: the same weights.
    for (const auto& [sharding, checkpointing] :
         std::vector<std::pair<Gpt2Sharding, bool>>{{Gpt2Sharding::kZero3, false},
                                                    {Gpt2Sharding::kZero3, true},
                                                    {Gpt2Sharding::kFsdpWrap, false}}) {
      const auto sharded = run(sharding, checkpointing);
      ASSERT_EQ(sharded[0].weights.size(), initial.size());
      for (int rank = 0; rank < 2; ++rank) {
        EXPECT_TRUE(sharded[rank].blocks_released)
            << "rank " << rank << ", sharding " << static_cast<int>(sharding);
        EXPECT_FALSE(data_parallel[rank].blocks_released) << "rank " << rank;
        for (size_t i = 0; i < initial.size(); ++i) {
          EXPECT_TRUE(at::equal(sharded[rank].weights[i], data_parallel[rank].weights[i]))
              << "tied " << tied << ", sharding " << static_cast<int>(sharding)
              << ", checkpointing " << checkpointing << ", rank " << rank << ", weight " << i
              << ": max difference "
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
