// The BERT classifier under ZeRO stage 3: its encoder layers run through
// unit_forward, so prepare() makes each one a unit whose parameters hold
// memory only while it runs, and training on padded batches is bitwise the
// same as under data parallelism, with activation checkpointing too. Ranks are threads with real
// collectives.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/models/bert.h"
#include "sharding/zero_test_support.h"

namespace bert_zero3_test {

namespace am = accelerate::models;

am::BertConfig zero3_bert_config() {
  am::BertConfig config;
  config.vocab_size = 40;
  config.hidden_size = 32;
  config.num_hidden_layers = 3;
  config.num_attention_heads = 4;
  config.intermediate_size = 40;
  config.max_position_embeddings = 16;
  config.hidden_dropout_prob = 0.0;  // the threads share one CPU generator
  config.attention_probs_dropout_prob = 0.0;
  config.set_num_labels(3);
  return config;
}

struct BertTrained {
  std::vector<at::Tensor> weights;
  bool layers_released = false;
};

// Three steps of AdamW on each rank's own padded batch, from `initial`.
BertTrained train_bert(std::shared_ptr<accelerate::Communicator> comm, int stage,
                       const std::vector<at::Tensor>& initial, bool checkpointing) {
  accelerate::AcceleratorOptions options;
  if (stage > 0) {
    options.deepspeed_plugin(
        accelerate::DeepSpeedPlugin().zero_stage(stage).gradient_clipping(std::nullopt));
  }
  accelerate::Accelerator accelerator(comm, options);
  am::BertForSequenceClassification model(zero3_bert_config());
  {
    at::NoGradGuard no_grad;
    const auto parameters = model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(initial[i]);
  }
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(0.01));
  model->bert->set_gradient_checkpointing(checkpointing);
  accelerator.prepare(model, optimizer);
  const at::Tensor mask =
      torch::tensor({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0}, at::kLong).view({2, 8});
  for (int step = 0; step < 3; ++step) {
    const at::Tensor ids = (at::arange(16, at::kLong) * (3 + step) + 5 * comm->rank() + 1)
                               .remainder(40)
                               .reshape({2, 8}) *
                           mask;
    const at::Tensor labels = torch::tensor({(step + comm->rank()) % 3, (step + 1) % 3}, at::kLong);
    accelerator.backward(model->loss(ids, labels, mask));
    optimizer.step();
    optimizer.zero_grad();
  }
  BertTrained out;
  out.layers_released = accelerate::testing::all_released(model->bert->encoder->parameters());
  out.weights = accelerate::testing::whole_weights(accelerator, *model);
  return out;
}

TEST(BertZero3, LayersAreUnitsAndTrainingMatchesDataParallelismWithAndWithoutCheckpointing) {
  torch::manual_seed(22);
  std::vector<at::Tensor> initial;
  for (const auto& p : am::BertForSequenceClassification(zero3_bert_config())->parameters()) {
    initial.push_back(p.detach().clone());
  }
  auto run = [&](int stage, bool checkpointing) {
    return accelerate::testing::on_each_rank<BertTrained>(
        2, [&](std::shared_ptr<accelerate::Communicator> comm) {
          return train_bert(std::move(comm), stage, initial, checkpointing);
        });
  };
  const auto data_parallel = run(0, false);
  // Units and activation checkpointing together: the same weights again.
  for (const bool checkpointing : {false, true}) {
    const auto sharded = run(3, checkpointing);
    ASSERT_EQ(sharded[0].weights.size(), initial.size());
    EXPECT_FALSE(at::allclose(data_parallel[0].weights[0], initial[0]))
        << "training did not move the weights: the comparison would prove nothing";
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(sharded[rank].layers_released) << "rank " << rank << " " << checkpointing;
      EXPECT_FALSE(data_parallel[rank].layers_released) << "rank " << rank;
      for (size_t i = 0; i < initial.size(); ++i) {
        EXPECT_TRUE(at::equal(sharded[rank].weights[i], data_parallel[rank].weights[i]))
            << "rank " << rank << ", weight " << i << ": max difference "
            << (sharded[rank].weights[i] - data_parallel[rank].weights[i])
                   .abs()
                   .max()
                   .item<double>()
            << (checkpointing ? " (checkpointed)" : "");
      }
    }
  }
}

}  // namespace bert_zero3_test
