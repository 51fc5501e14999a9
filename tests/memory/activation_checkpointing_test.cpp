// accelerate::checkpoint: gradients equal the plain run's bitwise on the CPU
// (with dropout, whose masks must be replayed; with bf16 autocast; with and
// without inputs that require grad; frozen parameters), backward leaves the
// random stream where the plain run leaves it, evaluation without grad mode
// just runs, fewer tensors are kept alive, and gradient sync on 2 ranks sees
// the parameters' gradients as without checkpointing.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "accelerate/memory/activation_checkpointing.h"
#include "accelerate/precision/autocast.h"
#include "support/autograd_graph.h"
#include "support/thread_ranks.h"

namespace {

// A transformer-MLP-like block with dropout, so that recomputation must
// replay the random masks.
struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : up(register_module("up", torch::nn::Linear(16, 64))),
        down(register_module("down", torch::nn::Linear(64, 16))),
        dropout(register_module("dropout", torch::nn::Dropout(0.25))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + dropout(down(torch::gelu(up(x)))); }
  torch::nn::Linear up, down;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(Block);

struct StackImpl : torch::nn::Module {
  explicit StackImpl(int depth) {
    for (int i = 0; i < depth; ++i)
      blocks.push_back(register_module("b" + std::to_string(i), Block()));
    head = register_module("head", torch::nn::Linear(16, 1));
  }
  torch::Tensor forward(torch::Tensor x, bool checkpointed) {
    for (auto& block : blocks)
      x = checkpointed ? accelerate::checkpoint_activations(block, x) : block->forward(x);
    return head(x);
  }
  std::vector<Block> blocks;
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Stack);

struct Result {
  torch::Tensor loss;
  std::vector<torch::Tensor> grads;
  torch::Tensor input_grad;
  torch::Tensor next_random;  // what the generator draws after backward
};

Result run(bool checkpointed, bool input_requires_grad, bool bf16 = false) {
  torch::manual_seed(7);
  Stack model(3);
  auto x = torch::randn({8, 16}).requires_grad_(input_requires_grad);
  auto y = torch::randn({8, 1});
  Result result;
  {
    accelerate::AutocastGuard autocast =
        bf16 ? accelerate::AutocastGuard(torch::kCPU, torch::kBFloat16)
             : accelerate::AutocastGuard();
    result.loss = torch::mse_loss(model->forward(x, checkpointed).to(torch::kFloat), y);
    result.loss.backward();
  }
  for (const auto& p : model->parameters()) result.grads.push_back(p.grad().clone());
  if (input_requires_grad) result.input_grad = x.grad().clone();
  result.next_random = torch::rand({4});
  return result;
}

void expect_same(const Result& a, const Result& b) {
  EXPECT_TRUE(torch::equal(a.loss, b.loss));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_TRUE(torch::equal(a.grads[i], b.grads[i])) << "parameter " << i;
  }
  EXPECT_EQ(a.input_grad.defined(), b.input_grad.defined());
  if (a.input_grad.defined()) EXPECT_TRUE(torch::equal(a.input_grad, b.input_grad));
  EXPECT_TRUE(torch::equal(a.next_random, b.next_random)) << "backward moved the random stream";
}

TEST(ActivationCheckpointing, GradientsEqualThePlainRunBitwiseWithDropout) {
  expect_same(run(true, true), run(false, true));
}

TEST(ActivationCheckpointing, ParametersGetGradientsWhenNoInputRequiresGrad) {
  const Result checkpointed = run(true, false);
  expect_same(checkpointed, run(false, false));
  for (const auto& grad : checkpointed.grads) EXPECT_GT(grad.abs().sum().item<double>(), 0);
}

TEST(ActivationCheckpointing, Bf16AutocastIsReplayed) {
  const Result checkpointed = run(true, true, /*bf16=*/true);
  expect_same(checkpointed, run(false, true, /*bf16=*/true));
  // The comparison means something: bf16 changed the gradients.
  EXPECT_FALSE(torch::equal(checkpointed.grads[0], run(false, true).grads[0]));
}

TEST(ActivationCheckpointing, WithoutRngPreservationDropoutMasksDiffer) {
  // The replay is what makes the masks match: without it the gradients differ.
  torch::manual_seed(3);
  Block block;
  auto x = torch::randn({8, 16}, torch::requires_grad());
  accelerate::checkpoint_activations(
      block, x, accelerate::ActivationCheckpointOptions().preserve_rng_state(false))
      .sum()
      .backward();
  const auto unpreserved = block->up->weight.grad().clone();
  block->zero_grad();
  torch::manual_seed(3);
  torch::randn({8, 16});  // the same draws as x above
  block->forward(x.detach()).sum().backward();
  EXPECT_FALSE(torch::equal(unpreserved, block->up->weight.grad()));
}

TEST(ActivationCheckpointing, FrozenParametersStayWithoutGradients) {
  torch::manual_seed(1);
  Block block;
  block->up->weight.requires_grad_(false);
  auto x = torch::randn({4, 16}, torch::requires_grad());
  accelerate::checkpoint_activations(block, x).sum().backward();
  EXPECT_FALSE(block->up->weight.grad().defined());
  EXPECT_TRUE(block->down->weight.grad().defined());
}

TEST(ActivationCheckpointing, WithoutGradModeTheFunctionJustRuns) {
  torch::manual_seed(1);
  Block block;
  block->eval();
  auto x = torch::randn({4, 16}, torch::requires_grad());
  torch::NoGradGuard no_grad;
  auto out = accelerate::checkpoint_activations(block, x);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_TRUE(torch::equal(out, block->forward(x)));
}

// The nodes of the graph behind `out`: each plain-run node keeps the
// activations its backward needs alive; a checkpointed block is one node.
using accelerate::testing::graph_nodes;

TEST(ActivationCheckpointing, RecordsOneNodeInsteadOfTheBlocksGraph) {
  torch::manual_seed(1);
  Block block;
  auto x = torch::randn({256, 16}, torch::requires_grad());
  const int plain = graph_nodes(block->forward(x));
  const int checkpointed = graph_nodes(accelerate::checkpoint_activations(block, x));
  EXPECT_GT(plain, checkpointed + 4);
  // The checkpoint node, then the accumulators of the input and the 4 parameters.
  EXPECT_EQ(checkpointed, 6);
}

TEST(ActivationCheckpointing, AFunctionWithoutOutputsIsAnError) {
  auto x = torch::randn({2}, torch::requires_grad());
  EXPECT_THROW(
      accelerate::checkpoint_function(
          [](const std::vector<torch::Tensor>&) { return std::vector<torch::Tensor>{}; }, {x}, {}),
      accelerate::Error);
}

TEST(ActivationCheckpointing, DataParallelTrainingMatchesThePlainRun) {
  // The reducer's hooks on the parameters' gradient accumulators must fire
  // for gradients that arrive through the checkpoint node.
  // The ranks are threads sharing LibTorch's global generator: seeding it
  // and drawing the initial weights must not interleave between them, or
  // rank 0's weights (which prepare broadcasts) differ from run to run.
  std::mutex initialising;
  const auto train = [&initialising](bool checkpointed) {
    std::vector<torch::Tensor> trained;
    accelerate::testing::run_rank_communicators(
        2, [&](std::shared_ptr<accelerate::Communicator> comm) {
          accelerate::Accelerator accelerator(comm, accelerate::AcceleratorOptions());
          Stack model{nullptr};
          {
            std::lock_guard<std::mutex> lock(initialising);
            torch::manual_seed(5);
            model = Stack(2);
          }
          model->eval();  // no dropout: ranks draw from one shared generator here
          accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                             torch::optim::SGDOptions(0.1));
          accelerator.prepare(model, optimizer);
          auto generator = at::detail::createCPUGenerator(11 + comm->rank());
          for (int step = 0; step < 3; ++step) {
            auto x = at::randn({8, 16}, generator);
            auto y = at::randn({8, 1}, generator);
            accelerator.backward(torch::mse_loss(model->forward(x, checkpointed), y));
            optimizer.step();
            optimizer.zero_grad();
          }
          if (comm->rank() == 0) {
            for (const auto& p : model->parameters()) trained.push_back(p.detach().clone());
          }
        });
    return trained;
  };
  const auto plain = train(false), checkpointed = train(true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(torch::equal(plain[i], checkpointed[i])) << "parameter " << i;
  }
}

}  // namespace
