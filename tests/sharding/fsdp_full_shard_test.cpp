// FSDP FULL_SHARD from the program's own FullyShardedDataParallelPlugin:
// ZeRO stage 3 whose units are the modules FSDP's auto wrap policy picks.
// The model is a stack of residual blocks called through
// accelerate::unit_forward; training must equal data parallelism bitwise
// (sums are rank-ordered through shared memory) with the units' parameters
// freed between steps, and a class the model lacks is refused by prepare().
// Ranks are threads with real collectives.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "accelerate/sharding/unit_forward.h"
#include "parallel/storage_release.h"
#include "sharding/plugin_from_environment.h"
#include "sharding/unit_policy.h"
#include "sharding/zero_test_model.h"
#include "support/thread_ranks.h"

namespace fsdp_full_shard_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::FsdpAutoWrapPolicy;
using accelerate::FsdpShardingStrategy;
using accelerate::FullyShardedDataParallelPlugin;
using accelerate::testing::zero_data;

// 16*32+32 + 32*16+16 = 1072 parameter elements: up 544, down 528.
struct ResidualBlockImpl : torch::nn::Module {
  ResidualBlockImpl()
      : up(register_module("up", torch::nn::Linear(16, 32))),
        down(register_module("down", torch::nn::Linear(32, 16))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto inner = up(x);
    if (seen != nullptr) watch(inner);
    return x + down(torch::tanh(inner));
  }
  // While it runs, whether the block after it holds memory (forward) and,
  // in its backward, whether the block before it does (a prefetched block
  // does, a freed one does not), and whether its own `up` weight, whose
  // gradient autograd has not computed yet, already has its .grad in the
  // reduce-scatter buffer. Appended to `seen` when set.
  void watch(at::Tensor& inner) {
    if (next) seen->push_back(std::string("forward: next ") + whole(next));
    if (!previous) return;
    inner.register_hook([this](const at::Tensor& grad) {
      seen->push_back(std::string("backward: previous ") + whole(previous) +
                      (up->weight.grad().defined() ? ", own gradient bound" : ", own unbound"));
      return grad;
    });
  }
  static const char* whole(const ResidualBlockImpl* block) {
    return accelerate::detail::storage_released(block->up->weight) ? "free" : "whole";
  }
  torch::nn::Linear up, down;
  ResidualBlockImpl *next = nullptr, *previous = nullptr;
  std::vector<std::string>* seen = nullptr;
};
TORCH_MODULE(ResidualBlock);

struct BlockStackImpl : torch::nn::Module {
  BlockStackImpl()
      : input(register_module("input", torch::nn::Linear(4, 16))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        output(register_module("output", torch::nn::Linear(16, 1))) {
    for (int i = 0; i < 3; ++i) blocks->push_back(ResidualBlock());
    auto generator = at::detail::createCPUGenerator(47);
    torch::NoGradGuard no_grad;
    for (auto& parameter : parameters()) {
      parameter.copy_(at::randn(parameter.sizes(), generator) * 0.3);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::tanh(input(x));
    for (const auto& module : *blocks) {
      auto block = std::dynamic_pointer_cast<ResidualBlockImpl>(module);
      h = accelerate::unit_forward(block, h);
    }
    return output(h);
  }
  torch::nn::Linear input;
  torch::nn::ModuleList blocks;
  torch::nn::Linear output;
};
TORCH_MODULE(BlockStack);

struct Outcome {
  std::vector<at::Tensor> parameters;  // whole, through get_state_dict
  bool blocks_released = false;        // every block parameter without memory
  bool root_whole = false;             // input and output keep theirs
};

Outcome train(std::shared_ptr<Communicator> comm,
              const std::optional<FullyShardedDataParallelPlugin>& plugin) {
  AcceleratorOptions options;
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  options.fsdp_plugin(plugin);
  Accelerator accelerator(std::move(comm), options);
  BlockStack model;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(
      model->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.05));
  accelerate::DataLoader loader(zero_data(64), accelerate::DataLoaderOptions(8));
  accelerator.prepare(model, optimizer, loader);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (auto& batch : loader) {
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  Outcome outcome;
  outcome.blocks_released = true;
  for (const auto& p : model->blocks->parameters()) {
    outcome.blocks_released &= accelerate::detail::storage_released(p);
  }
  outcome.root_whole = !accelerate::detail::storage_released(model->input->weight) &&
                       !accelerate::detail::storage_released(model->output->weight);
  for (const auto& entry : accelerator.get_state_dict(model)) {
    outcome.parameters.push_back(entry.second);
  }
  return outcome;
}

std::vector<Outcome> train_on_two_ranks(
    const std::optional<FullyShardedDataParallelPlugin>& plugin) {
  std::vector<Outcome> outcomes(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    outcomes[rank] = train(comm, plugin);
  });
  return outcomes;
}

void expect_bitwise_equal(const std::vector<Outcome>& got, const std::vector<Outcome>& want) {
  ASSERT_EQ(got.size(), want.size());
  BlockStack initial;
  ASSERT_FALSE(want[0].parameters.empty());
  EXPECT_FALSE(at::equal(want[0].parameters[0], initial->parameters()[0]))
      << "training did not move the parameters: the comparison would prove nothing";
  for (std::size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].parameters.size(), want[r].parameters.size());
    for (std::size_t i = 0; i < got[r].parameters.size(); ++i) {
      EXPECT_TRUE(at::equal(got[r].parameters[i], want[r].parameters[i]))
          << "rank " << r << ", parameter " << i;
    }
  }
}

FullyShardedDataParallelPlugin full_shard() {
  return FullyShardedDataParallelPlugin().sharding_strategy(FsdpShardingStrategy::kFullShard);
}

// What the middle block saw of its neighbours in the second training step
// (the first has no unit order to prefetch by yet), on rank 0.
std::vector<std::string> middle_block_sees(const FullyShardedDataParallelPlugin& plugin) {
  std::vector<std::string> seen;
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(std::move(comm), AcceleratorOptions().fsdp_plugin(plugin));
    BlockStack model;
    std::vector<ResidualBlockImpl*> blocks;
    for (const auto& block : *model->blocks) blocks.push_back(block->as<ResidualBlockImpl>());
    blocks[1]->previous = blocks[0];
    blocks[1]->next = blocks[2];
    accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                       torch::optim::SGDOptions(0.01));
    accelerate::DataLoader loader(zero_data(32), accelerate::DataLoaderOptions(8));
    accelerator.prepare(model, optimizer, loader);
    std::vector<std::string> mine;
    int step = 0;
    for (auto& batch : loader) {
      if (++step == 2) blocks[1]->seen = &mine;
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      blocks[1]->seen = nullptr;
      optimizer.step();
      optimizer.zero_grad();
    }
    if (rank == 0) seen = mine;
  });
  return seen;
}

// FSDP 1's backward_prefetch / forward_prefetch: with them, the next unit's
// gather runs while one computes; NO_PREFETCH (the default) gathers each
// unit only when it runs. FSDP 2 always prefetches.
TEST(FsdpFullShard, PrefetchSettingsDecideWhetherTheNextUnitIsGatheredEarly) {
  const auto plugin = full_shard()
                          .auto_wrap_policy(FsdpAutoWrapPolicy::kTransformerBasedWrap)
                          .transformer_cls_names_to_wrap({"ResidualBlock"});
  using ::testing::ElementsAre;
  EXPECT_THAT(middle_block_sees(plugin),
              ElementsAre("forward: next free", "backward: previous free, own gradient bound"));
  EXPECT_THAT(middle_block_sees(FullyShardedDataParallelPlugin(plugin).backward_prefetch(
                  accelerate::FsdpBackwardPrefetch::kBackwardPre)),
              ElementsAre("forward: next free", "backward: previous whole, own gradient bound"));
  EXPECT_THAT(middle_block_sees(FullyShardedDataParallelPlugin(plugin).forward_prefetch(true)),
              ElementsAre("forward: next whole", "backward: previous free, own gradient bound"));
  EXPECT_THAT(middle_block_sees(FullyShardedDataParallelPlugin(plugin).fsdp_version(2)),
              ElementsAre("forward: next whole", "backward: previous whole, own gradient bound"));
}

TEST(FsdpFullShard, TransformerBasedWrapTrainsAsDataParallelismWithTheBlocksReleased) {
  const auto reference = train_on_two_ranks(std::nullopt);
  const auto sharded =
      train_on_two_ranks(full_shard()
                             .auto_wrap_policy(FsdpAutoWrapPolicy::kTransformerBasedWrap)
                             .transformer_cls_names_to_wrap({"ResidualBlock"}));
  expect_bitwise_equal(sharded, reference);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(sharded[r].blocks_released) << "rank " << r;
    EXPECT_TRUE(sharded[r].root_whole) << "rank " << r;
    EXPECT_FALSE(reference[r].blocks_released) << "rank " << r;
  }
}

// The units each min_num_params picks in BlockStack (input 80 elements,
// output 17, each block 1072 of which up 544 and down 528).
std::vector<std::string> size_based_units(int64_t min_num_params) {
  BlockStack model;
  const auto policy =
      accelerate::sharding::unit_policy_of(full_shard()
                                               .auto_wrap_policy(FsdpAutoWrapPolicy::kSizeBasedWrap)
                                               .min_num_params(min_num_params));
  std::vector<std::string> paths;
  for (const auto& unit : accelerate::sharding::find_units(*model, policy))
    paths.push_back(unit.path);
  return paths;
}

TEST(FsdpFullShard, SizeBasedWrapPicksTheModulesOfAtLeastMinNumParams) {
  using ::testing::ElementsAre;
  EXPECT_THAT(size_based_units(1000), ElementsAre("blocks.0", "blocks.1", "blocks.2"));
  EXPECT_THAT(size_based_units(540), ElementsAre("blocks.0.up", "blocks.1.up", "blocks.2.up"));
  EXPECT_THAT(size_based_units(2000), ElementsAre());  // the ModuleList is never a unit
  EXPECT_THAT(size_based_units(0), ElementsAre());     // Accelerate drops the policy
  // The blocks as units: they run through unit_forward, so they are freed.
  const auto reference = train_on_two_ranks(std::nullopt);
  const auto sharded = train_on_two_ranks(
      full_shard().auto_wrap_policy(FsdpAutoWrapPolicy::kSizeBasedWrap).min_num_params(1000));
  expect_bitwise_equal(sharded, reference);
  EXPECT_TRUE(sharded[0].blocks_released);
  EXPECT_TRUE(sharded[1].blocks_released);
}

TEST(FsdpFullShard, AClassTheModelLacksIsAConfigErrorAtPrepare) {
  std::vector<std::string> messages(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm,
                            AcceleratorOptions().fsdp_plugin(
                                full_shard()
                                    .auto_wrap_policy(FsdpAutoWrapPolicy::kTransformerBasedWrap)
                                    .transformer_cls_names_to_wrap({"GPT2Block"})));
    BlockStack model;
    try {
      accelerator.prepare(model);
      messages[rank] = "(no error)";
    } catch (const accelerate::ConfigError& error) {
      messages[rank] = error.what();
    }
  });
  for (const auto& message : messages) {
    EXPECT_THAT(message, ::testing::StartsWith("fsdp_transformer_layer_cls_to_wrap: no module of "
                                               "class 'GPT2Block' in the model (its classes: "));
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace fsdp_full_shard_test
