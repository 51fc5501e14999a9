// The Llama model under ZeRO stage 3: its decoder layers run through
// unit_forward, so prepare() makes each one a unit whose parameters hold
// memory only while it runs, and training is bitwise the same as under data
// parallelism. Ranks are threads with real collectives (rank-ordered sums).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/models/llama.h"
#include "sharding/zero_test_support.h"

namespace llama_zero3_test {

namespace am = accelerate::models;

am::LlamaConfig zero3_llama_config() {
  am::LlamaConfig config;
  config.vocab_size = 48;
  config.hidden_size = 32;
  config.intermediate_size = 40;
  config.num_hidden_layers = 3;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.tie_word_embeddings = true;
  config.rope_scaling.type = am::RopeType::kLlama3;
  config.rope_scaling.original_max_position_embeddings = 16;
  return config;
}

struct Trained {
  std::vector<at::Tensor> weights;
  bool layers_released = false;
};

// Three steps of AdamW on each rank's own token ids, from `initial`.
Trained train_llama(std::shared_ptr<accelerate::Communicator> comm, int stage,
                    const std::vector<at::Tensor>& initial, bool checkpointing) {
  accelerate::AcceleratorOptions options;
  if (stage > 0) {
    options.deepspeed_plugin(
        accelerate::DeepSpeedPlugin().zero_stage(stage).gradient_clipping(std::nullopt));
  }
  accelerate::Accelerator accelerator(comm, options);
  am::LlamaForCausalLM model(zero3_llama_config());
  {
    // The same start on every rank without the CPU generator the threads share.
    at::NoGradGuard no_grad;
    const auto parameters = model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(initial[i]);
  }
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(0.01));
  model->model->set_gradient_checkpointing(checkpointing);
  accelerator.prepare(model, optimizer);
  for (int step = 0; step < 3; ++step) {
    const at::Tensor ids =
        (at::arange(16, at::kLong) * (3 + step) + 5 * comm->rank()).remainder(48).reshape({2, 8});
    accelerator.backward(model->loss(ids, ids));
    optimizer.step();
    optimizer.zero_grad();
  }
  Trained out;
  out.layers_released = accelerate::testing::all_released(model->model->layers->parameters());
  out.weights = accelerate::testing::whole_weights(accelerator, *model);
  return out;
}

TEST(LlamaZero3, LayersAreUnitsAndTrainingMatchesDataParallelism) {
  torch::manual_seed(21);
  std::vector<at::Tensor> initial;
  for (const auto& p : am::LlamaForCausalLM(zero3_llama_config())->parameters()) {
    initial.push_back(p.detach().clone());
  }
  auto run = [&](int stage, bool checkpointing) {
    return accelerate::testing::on_each_rank<Trained>(
        2, [&](std::shared_ptr<accelerate::Communicator> comm) {
          return train_llama(std::move(comm), stage, initial, checkpointing);
        });
  };
  const auto data_parallel = run(0, false);
  EXPECT_FALSE(at::allclose(data_parallel[0].weights[0], initial[0]))
      << "training did not move the weights: the comparison would prove nothing";
  // ZeRO-3 units, with and without activation checkpointing of the layers.
  for (bool checkpointing : {false, true}) {
    const auto sharded = run(3, checkpointing);
    ASSERT_EQ(sharded[0].weights.size(), initial.size());
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(sharded[rank].layers_released) << "rank " << rank;
      EXPECT_FALSE(data_parallel[rank].layers_released) << "rank " << rank;
      for (size_t i = 0; i < initial.size(); ++i) {
        EXPECT_TRUE(at::equal(sharded[rank].weights[i], data_parallel[rank].weights[i]))
            << "checkpointing " << checkpointing << ", rank " << rank << ", weight " << i
            << ": max difference "
            << (sharded[rank].weights[i] - data_parallel[rank].weights[i])
                   .abs()
                   .max()
                   .item<double>();
      }
    }
  }
}

}  // namespace llama_zero3_test
