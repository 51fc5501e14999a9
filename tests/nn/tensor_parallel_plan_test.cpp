// Tensor-parallel plans: transformers' pattern words name a model's layers
// (`*` for one name), the first matching rule decides, and a plan that
// names nothing, names a layer that cannot be split or uses an unknown
// style is refused in one line before any layer is split.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "accelerate/common/errors.h"
#include "accelerate/nn/tensor_parallel_plan.h"
#include "support/error_message.h"
#include "support/thread_ranks.h"

namespace tensor_parallel_plan_test {

using accelerate::ParallelLinear;
using accelerate::TensorParallel;
using accelerate::TensorParallelStyle;
using accelerate::testing::error_of;

struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : up(register_module("up", ParallelLinear(8, 16))),
        down(register_module("down", ParallelLinear(16, 8))),
        plain(register_module("plain", torch::nn::Linear(8, 8))) {}
  ParallelLinear up, down;
  torch::nn::Linear plain;
};
TORCH_MODULE(Block);

struct StackImpl : torch::nn::Module {
  StackImpl() : blocks(register_module("blocks", torch::nn::ModuleList())) {
    for (int i = 0; i < 3; ++i) blocks->push_back(Block());
  }
  BlockImpl& block(int i) { return *blocks[i]->as<BlockImpl>(); }
  torch::nn::ModuleList blocks;
};
TORCH_MODULE(Stack);

TEST(TensorParallelPlan, PatternsNameOneModuleNamePerStar) {
  using accelerate::tensor_parallel_pattern_matches;
  EXPECT_TRUE(tensor_parallel_pattern_matches("blocks.*.up", "blocks.12.up"));
  EXPECT_TRUE(tensor_parallel_pattern_matches("lm_head", "lm_head"));
  EXPECT_FALSE(tensor_parallel_pattern_matches("blocks.*.up", "blocks.1.2.up"));
  EXPECT_FALSE(tensor_parallel_pattern_matches("blocks.*.up", "blocks.1.up.inner"));
  EXPECT_FALSE(tensor_parallel_pattern_matches("blocks.*.up", "blocks.1.upper"));
}

TEST(TensorParallelPlan, SplitsTheLayersItNamesAsTheFirstMatchingRuleSays) {
  accelerate::testing::run_rank_communicators(
      2, [](std::shared_ptr<accelerate::Communicator> comm) {
        Stack stack;
        const auto plan = accelerate::parse_tensor_parallel_plan({{"blocks.0.up", "colwise_rep"},
                                                                  {"blocks.*.up", "colwise"},
                                                                  {"blocks.*.down", "rowwise"}});
        accelerate::parallelize_module(*stack, plan, TensorParallel(comm));
        EXPECT_EQ(stack->block(0).up->style(), TensorParallelStyle::kColwiseRep);
        EXPECT_EQ(stack->block(2).up->style(), TensorParallelStyle::kColwise);
        EXPECT_EQ(stack->block(1).down->style(), TensorParallelStyle::kRowwise);
        EXPECT_EQ(stack->block(1).up->weight.sizes(), (std::vector<int64_t>{8, 8}));
        EXPECT_EQ(stack->block(1).down->weight.sizes(), (std::vector<int64_t>{8, 8}));
        // A block through the split layers equals... its shape, whole.
        auto& b = stack->block(1);
        EXPECT_EQ(b.down(b.up(torch::ones({2, 8}))).sizes(), (std::vector<int64_t>{2, 8}));
      });
}

TEST(TensorParallelPlan, BadPlansAreRefusedInOneLineBeforeAnythingIsSplit) {
  Stack stack;
  EXPECT_EQ(error_of([&] {
              accelerate::parse_tensor_parallel_plan({{"blocks.*.up", "colwize"}});
            }),
            "tensor parallel plan: 'blocks.*.up' has style 'colwize', not one of replicate, "
            "colwise, colwise_rep, rowwise");
  const auto missing = accelerate::parse_tensor_parallel_plan(
      {{"blocks.*.up", "colwise"}, {"blocks.*.attn", "colwise"}});
  EXPECT_EQ(error_of([&] { accelerate::parallelize_module(*stack, missing, TensorParallel()); }),
            "tensor parallel plan: 'blocks.*.attn' names no module of the model");
  EXPECT_EQ(stack->block(0).up->style(), TensorParallelStyle::kReplicate) << "nothing split";
  const auto plain = accelerate::parse_tensor_parallel_plan({{"blocks.*.plain", "colwise"}});
  const std::string message =
      error_of([&] { accelerate::parallelize_module(*stack, plain, TensorParallel()); });
  EXPECT_EQ(message.rfind("tensor parallel plan: blocks.0.plain (torch::nn::Linear", 0), 0u)
      << message;
  EXPECT_NE(message.find("is not a layer tensor parallelism splits"), std::string::npos) << message;
}

}  // namespace tensor_parallel_plan_test
