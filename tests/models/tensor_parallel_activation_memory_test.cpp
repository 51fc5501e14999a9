// What a Llama block's activations hold per process at tensor parallelism,
// counted (the counting CPU allocator the memory benchmarks use) on real
// ranks (threads over a FileStore, Gloo): a block is what a model of two
// decoder layers holds for backward beyond one of one layer. With Megatron's
// sequence parallelism each process holds about 1/tp of the unsplit block
// (the norms, residuals and the colwise layers' inputs at 1/tp of the
// tokens, the attention at 1/tp of the heads); without it the replicated
// activations stay whole on every process.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "accelerate/models/llama.h"
#include "compat/memory_compat.h"
#include "support/thread_ranks.h"
#include "tensor_parallel_steps.h"
#include "tiny_llama_config.h"

namespace tensor_parallel_activation_memory_test {

namespace am = accelerate::models;
using accelerate::Communicator;
using accelerate::TensorParallel;
using accelerate::testing::run_rank_communicators;

constexpr int64_t kVocab = 64, kTokens = 64;

am::LlamaConfig config_with_layers(int64_t layers) {
  am::LlamaConfig c = accelerate::testing::tiny_llama_config(kVocab, kTokens);
  c.hidden_size = 64, c.intermediate_size = 128, c.num_hidden_layers = layers;
  return c;
}

am::LlamaForCausalLM model_of(int64_t layers, const std::vector<at::Tensor>& initial) {
  return accelerate::testing::model_with(
      [&] { return am::LlamaForCausalLM(config_with_layers(layers)); }, initial);
}

// What the loss of `model` holds for backward: the rise in live CPU bytes
// (every rank's, when `comm` is given: the ranks are threads of one
// process) once the forward returned, after a warm-up step made the
// gradients.
int64_t held_by_forward(am::LlamaForCausalLM& model, Communicator* comm) {
  const at::Tensor batch = accelerate::testing::step_batch(0, kVocab, kTokens);
  model->loss(batch, batch).backward();
  const auto sync = [&] {
    if (comm != nullptr) comm->barrier();
  };
  sync();
  const int64_t start = accelerate::compat::cpu_live_bytes();
  sync();
  at::Tensor loss = model->loss(batch, batch);
  sync();
  const int64_t held = accelerate::compat::cpu_live_bytes() - start;
  sync();
  loss.backward();
  return held;
}

TEST(TensorParallelActivationMemory, ABlockHoldsAboutOneOverTpWithSequenceParallelism) {
  accelerate::compat::install_cpu_allocation_counter();
  std::vector<std::vector<at::Tensor>> initial;
  for (int64_t layers : {1, 2}) {
    initial.push_back(accelerate::testing::initial_parameters_of(
        [&] { return am::LlamaForCausalLM(config_with_layers(layers)); }, 3));
  }
  std::vector<int64_t> whole;
  for (int64_t layers : {1, 2}) {
    auto model = model_of(layers, initial[layers - 1]);
    whole.push_back(held_by_forward(model, nullptr));
  }
  const double unsplit_block = static_cast<double>(whole[1] - whole[0]);
  ASSERT_GT(unsplit_block, 0);
  // Per process: what the two rank threads held together, halved.
  std::vector<double> block(2);
  for (bool sequence_parallel : {false, true}) {
    std::vector<int64_t> held(2);
    run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
      for (int64_t layers : {1, 2}) {
        auto model = model_of(layers, initial[layers - 1]);
        model->parallelize(TensorParallel(comm, sequence_parallel));
        const int64_t rise = held_by_forward(model, comm.get());
        if (comm->rank() == 0) held[layers - 1] = rise;
      }
    });
    block[sequence_parallel] = static_cast<double>(held[1] - held[0]) / 2;
  }
  RecordProperty("unsplit_block_bytes", static_cast<int>(unsplit_block));
  RecordProperty("tp2_block_bytes", static_cast<int>(block[0]));
  RecordProperty("tp2_sequence_parallel_block_bytes", static_cast<int>(block[1]));
  // Measured on 2026-12-04: 0.472 with sequence parallelism, 0.584 without
  // (Megatron's count for this shape, (10 + 24/t + 5as/(ht)) / (34 + 5as/h)
  // of the unsplit block, is 0.59).
  EXPECT_NEAR(block[1] / unsplit_block, 0.5, 0.05) << "sequence parallel: about 1/tp";
  EXPECT_GT(block[0] / unsplit_block, 0.55) << "without it the norms' inputs stay whole";
  EXPECT_GT(block[0] - block[1], 0.08 * unsplit_block) << "sequence parallelism saves memory";
}

}  // namespace tensor_parallel_activation_memory_test
