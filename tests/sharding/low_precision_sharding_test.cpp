// Low-precision collectives in the sharded engine (FSDP's
// mixed_precision_policy): bf16 parameter gathers and gradient
// reduce-scatters at ZeRO stages 2 and 3, with fp32 master shards. On a
// model whose weights and gradients bf16 holds exactly the result is fp32
// collectives' bitwise; on an ordinary one it stays close, the masters keep
// fp32 precision while every process computes with the same rounded
// weights; half the bytes move; checkpoints hold the masters, whichever
// collectives saved or load them. Ranks are threads with real collectives.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/distributed/communication_traffic.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "accelerate/sharding/unit_forward.h"
#include "parallel/storage_release.h"
#include "sharding/smooth_net.h"
#include "sharding/zero_test_support.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace low_precision_sharding_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::CollectiveDtype;
using accelerate::Communicator;
using accelerate::FsdpAutoWrapPolicy;
using accelerate::FsdpMixedPrecisionPolicy;
using accelerate::FsdpShardingStrategy;
using accelerate::FullyShardedDataParallelPlugin;
using accelerate::TrafficKind;

// Whether bf16 holds every element of `t` exactly.
bool bf16_exact(const at::Tensor& t) {
  return t.to(at::kBFloat16).to(at::kFloat).equal(t.to(at::kFloat));
}

// Three units side by side (each relu(W x), W 8x4) summed, plus a root
// Linear of x: the loss sum(y * c) is linear in every weight, so each
// gradient is an integer sum of x's entries (in {-1, 0, 1}) and each
// SGD step (lr 1/4, averaged over 2 processes) moves a weight by a
// multiple of 1/8; with weights starting at multiples of 1/2 and staying
// below 2 in magnitude, bf16's 8 significant bits hold every weight and
// gradient of the 6 steps exactly (checked with PyTorch beforehand, and
// on the fp32 run by the test itself).
struct ExactBlockImpl : torch::nn::Module {
  ExactBlockImpl() : linear(register_module("linear", torch::nn::Linear(lin(4, 8)))) {}
  static torch::nn::LinearOptions lin(int in, int out) {
    return torch::nn::LinearOptions(in, out).bias(false);
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(linear(x)); }
  torch::nn::Linear linear;
};
TORCH_MODULE(ExactBlock);

struct ExactNetImpl : torch::nn::Module {
  ExactNetImpl()
      : blocks(register_module("blocks", torch::nn::ModuleList())),
        root(register_module("root", torch::nn::Linear(ExactBlockImpl::lin(4, 1)))) {
    for (int i = 0; i < 3; ++i) blocks->push_back(ExactBlock());
    auto generator = at::detail::createCPUGenerator(11);
    torch::NoGradGuard no_grad;
    for (auto& parameter : parameters()) {
      parameter.copy_(at::randint(-2, 3, parameter.sizes(), generator).to(at::kFloat) / 2);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = root(x);
    for (const auto& module : *blocks) {
      auto block = std::dynamic_pointer_cast<ExactBlockImpl>(module);
      h = h + accelerate::unit_forward(block, x).sum(1, /*keepdim=*/true);
    }
    return h;
  }
  torch::nn::ModuleList blocks;
  torch::nn::Linear root;
};
TORCH_MODULE(ExactNet);

// An ordinary model (tests/sharding/smooth_net.h): nothing about it is
// exact in bf16.
using sharding_test_models::SmoothNet;

FullyShardedDataParallelPlugin plugin_for(int stage, std::optional<CollectiveDtype> wire,
                                          const char* unit_class) {
  FullyShardedDataParallelPlugin plugin;
  plugin.sharding_strategy(stage == 3 ? FsdpShardingStrategy::kFullShard
                                      : FsdpShardingStrategy::kShardGradOp);
  if (stage == 3) {
    plugin.auto_wrap_policy(FsdpAutoWrapPolicy::kTransformerBasedWrap)
        .transformer_cls_names_to_wrap({unit_class});
  }
  if (wire) plugin.mixed_precision_policy(FsdpMixedPrecisionPolicy().param_dtype(*wire));
  return plugin;
}

AcceleratorOptions options_for(const FullyShardedDataParallelPlugin& plugin) {
  AcceleratorOptions options;
  // Several buckets, so that stage 3 has a root bucket besides the units'.
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.0005).first_bucket_cap_mb(0.0002));
  options.fsdp_plugin(plugin);
  return options;
}

struct Outcome {
  std::vector<at::Tensor> saved;        // get_state_dict after training
  std::vector<at::Tensor> whole;        // the model's whole parameters as they are (not freed)
  std::vector<at::Tensor> masters;      // what the optimizer steps
  std::vector<at::Tensor> saved_model;  // save_model's files, loaded back
  std::uint64_t reduce_scatter_bytes = 0;
  std::uint64_t all_gather_bytes = 0;
  std::vector<float> losses;
};

std::uint64_t sent(Communicator& comm, TrafficKind kind) {
  std::uint64_t bytes = 0;
  for (const auto& group : comm.traffic()) bytes += group.of(kind).bytes_sent;
  return bytes;
}

template <class Net>
void read_outcome(Accelerator& accelerator, Net& model, torch::optim::Optimizer& optimizer,
                  Outcome& outcome) {
  for (const auto& p : model->parameters()) {
    if (!accelerate::detail::storage_released(p)) outcome.whole.push_back(p.detach().clone());
  }
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) outcome.masters.push_back(p.detach().clone());
  }
  for (const auto& entry : accelerator.get_state_dict(model)) outcome.saved.push_back(entry.second);
}

Outcome train_exact(std::shared_ptr<Communicator> comm, int stage,
                    std::optional<CollectiveDtype> wire) {
  Accelerator accelerator(comm, options_for(plugin_for(stage, wire, "ExactBlockImpl")));
  ExactNet model;
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.25));
  accelerator.prepare(model, optimizer);
  auto generator = at::detail::createCPUGenerator(5 + comm->rank());
  comm->reset_traffic();
  for (int step = 0; step < 6; ++step) {
    const at::Tensor x = at::randint(-1, 2, {4, 4}, generator).to(at::kFloat);
    const at::Tensor c = at::randint(-1, 2, {4, 1}, generator).to(at::kFloat);
    accelerator.backward((model->forward(x) * c).sum());
    optimizer.step();
    optimizer.zero_grad();
  }
  Outcome outcome;
  outcome.reduce_scatter_bytes = sent(*comm, TrafficKind::kReduceScatter);
  outcome.all_gather_bytes = sent(*comm, TrafficKind::kAllGather);
  read_outcome(accelerator, model, optimizer, outcome);
  return outcome;
}

// `save_dir`: save_model's folder after training (empty: none); the files
// loaded back into a plain SmoothNet are Outcome::saved_model.
Outcome train_smooth(std::shared_ptr<Communicator> comm, int stage,
                     std::optional<CollectiveDtype> wire, const std::string& save_dir = "") {
  Accelerator accelerator(comm, options_for(plugin_for(stage, wire, "SmoothBlockImpl")));
  SmoothNet model;
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.02));
  accelerator.prepare(model, optimizer);
  auto generator = at::detail::createCPUGenerator(9 + comm->rank());
  for (int step = 0; step < 20; ++step) {
    const at::Tensor x = at::randn({8, 4}, generator);
    const at::Tensor y = torch::sin(x.sum(1, true));
    auto loss = torch::mse_loss(model->forward(x), y);
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
  }
  Outcome outcome;
  // The same held-out batch on every rank, after training.
  auto held_out = at::detail::createCPUGenerator(1234);
  const at::Tensor x = at::randn({64, 4}, held_out);
  {
    torch::NoGradGuard no_grad;
    outcome.losses.push_back(
        torch::mse_loss(model->forward(x), torch::sin(x.sum(1, true))).item<float>());
  }
  read_outcome(accelerator, model, optimizer, outcome);
  if (!save_dir.empty()) {
    accelerator.save_model(model, save_dir);
    SmoothNet plain;
    accelerate::load_model(*plain, save_dir);
    for (const auto& p : plain->parameters()) outcome.saved_model.push_back(p.detach().clone());
  }
  return outcome;
}

// `through_gloo`: sums through Gloo rather than shared memory, where a
// rounded reduce-scatter sends half the bytes (through shared memory the
// peers read the rounded fp32 buffer where it lies, and nothing is saved).
template <class Body>
std::vector<Outcome> on_two_ranks(Body body, bool through_gloo = false) {
  std::vector<Outcome> outcomes(2);
  accelerate::testing::RankOptions options;
  options.shared_memory_all_reduce = !through_gloo;
  accelerate::testing::run_rank_communicators(
      2,
      [&](std::shared_ptr<Communicator> comm) {
        const int rank = comm->rank();
        outcomes[rank] = body(comm);
      },
      options);
  return outcomes;
}

void expect_bitwise(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].equal(b[i])) << "tensor " << i;
}

class LowPrecisionStage : public ::testing::TestWithParam<int> {};

TEST_P(LowPrecisionStage, ExactModelTrainsBitwiseAsWithFp32Collectives) {
  const int stage = GetParam();
  const auto fp32 = on_two_ranks([&](auto comm) { return train_exact(comm, stage, {}); });
  const auto bf16 =
      on_two_ranks([&](auto comm) { return train_exact(comm, stage, CollectiveDtype::kBf16); });
  // The premise: bf16 holds what fp32 training produced, and it moved.
  for (const auto& w : fp32[0].saved) EXPECT_TRUE(bf16_exact(w));
  const std::vector<at::Tensor> initial = ExactNet()->parameters();
  ASSERT_EQ(initial.size(), fp32[0].saved.size());
  for (std::size_t i = 0; i < initial.size(); ++i)
    EXPECT_FALSE(initial[i].equal(fp32[0].saved[i])) << "tensor " << i << " trained";
  for (int rank = 0; rank < 2; ++rank) {
    expect_bitwise(bf16[rank].saved, fp32[rank].saved);
    expect_bitwise(bf16[rank].masters, fp32[rank].masters);
    expect_bitwise(bf16[rank].whole, fp32[rank].whole);
  }
}

TEST_P(LowPrecisionStage, Bf16CollectivesMoveHalfTheBytes) {
  const int stage = GetParam();
  const auto fp32 = on_two_ranks([&](auto comm) { return train_exact(comm, stage, {}); }, true);
  const auto bf16 = on_two_ranks(
      [&](auto comm) { return train_exact(comm, stage, CollectiveDtype::kBf16); }, true);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(fp32[rank].reduce_scatter_bytes, 0u);
    EXPECT_GT(fp32[rank].all_gather_bytes, 0u);
    EXPECT_EQ(2 * bf16[rank].reduce_scatter_bytes, fp32[rank].reduce_scatter_bytes);
    EXPECT_EQ(2 * bf16[rank].all_gather_bytes, fp32[rank].all_gather_bytes);
  }
}

TEST_P(LowPrecisionStage, OrdinaryModelTrainsCloseWithFp32MastersAndEqualRoundedWeights) {
  const int stage = GetParam();
  const auto fp32 = on_two_ranks([&](auto comm) { return train_smooth(comm, stage, {}); });
  accelerate::testing::TempDir saved("accelerate-lowp-model");
  const auto bf16 = on_two_ranks(
      [&](auto comm) { return train_smooth(comm, stage, CollectiveDtype::kBf16, saved.path()); });
  // save_model writes the masters, as get_state_dict returns them.
  expect_bitwise(bf16[0].saved_model, bf16[0].saved);
  // Every process computes with the same rounded weights...
  ASSERT_FALSE(bf16[0].whole.empty());
  expect_bitwise(bf16[0].whole, bf16[1].whole);
  for (const auto& w : bf16[0].whole) EXPECT_TRUE(bf16_exact(w));
  // ...while the optimizer steps fp32 masters that keep fp32's precision
  // (a master that aliased its rounded gather would be bf16-exact), and
  // they are what get_state_dict returns.
  bool finer_than_bf16 = false;
  for (const auto& m : bf16[0].masters) {
    EXPECT_EQ(m.scalar_type(), at::kFloat);
    finer_than_bf16 |= !bf16_exact(m);
  }
  EXPECT_TRUE(finer_than_bf16);
  bool saved_finer = false;
  for (const auto& w : bf16[0].saved) saved_finer |= !bf16_exact(w);
  EXPECT_TRUE(saved_finer);
  // Close to fp32 collectives: each gather rounds a weight (size ~0.15-0.5)
  // by at most bf16's half ulp, 2^-9 relative (~1e-3), which perturbs the
  // gradients about as much, and each reduce-scatter rounds the gradients
  // by 2^-9 relative; 20 SGD steps of lr 0.02 on gradients of size ~0.5
  // add up to ~2e-4 at most. Measured: 9.1e-5 (stage 2) on the weights and
  // 0.442547 vs 0.442567 held-out loss; the bounds leave 10x and 100x room.
  ASSERT_EQ(bf16[0].saved.size(), fp32[0].saved.size());
  double worst = 0;
  for (std::size_t i = 0; i < fp32[0].saved.size(); ++i) {
    worst = std::max(worst, (bf16[0].saved[i] - fp32[0].saved[i]).abs().max().item<double>());
  }
  std::cout << "stage " << stage << ": largest weight difference bf16 vs fp32 collectives " << worst
            << ", held-out loss " << bf16[0].losses[0] << " vs " << fp32[0].losses[0] << "\n";
  EXPECT_LT(worst, 1e-3);
  EXPECT_GT(worst, 0.0);  // the bf16 run did round
  EXPECT_NEAR(bf16[0].losses[0], fp32[0].losses[0], 0.005 * fp32[0].losses[0]);
}

// A checkpoint run: SmoothNet with SGD (momentum, so the optimizer has
// state to resume) through `wire` collectives; loads `load_from` first when
// given, trains steps [first, last), saves to `save_to` after step
// `save_after` when given. The data of step s is the same in every run.
struct CheckpointRun {
  int stage = 2;
  std::optional<CollectiveDtype> wire;
  std::string load_from, save_to;
  int first = 0, last = 0, save_after = -1;
};

struct CheckpointOutcome {
  std::vector<at::Tensor> at_start;  // get_state_dict after loading (or at the start)
  std::vector<at::Tensor> whole_at_start;
  std::vector<at::Tensor> at_end;
};

CheckpointOutcome checkpoint_run(std::shared_ptr<Communicator> comm, const CheckpointRun& run) {
  Accelerator accelerator(comm, options_for(plugin_for(run.stage, run.wire, "SmoothBlockImpl")));
  SmoothNet model;
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.02).momentum(0.9));
  accelerator.prepare(model, optimizer);
  if (!run.load_from.empty()) accelerator.load_state(run.load_from);
  CheckpointOutcome outcome;
  // Before get_state_dict, whose save-time gathers re-round on the way out.
  for (const auto& p : model->parameters()) {
    if (!accelerate::detail::storage_released(p))
      outcome.whole_at_start.push_back(p.detach().clone());
  }
  outcome.at_start = accelerate::testing::whole_weights(accelerator, *model);
  sharding_test_models::train_regression_steps(accelerator, model, optimizer, comm->rank(),
                                               run.first, run.last, [&](int step) {
                                                 if (step == run.save_after)
                                                   accelerator.save_state(run.save_to);
                                               });
  outcome.at_end = accelerate::testing::whole_weights(accelerator, *model);
  return outcome;
}

std::vector<CheckpointOutcome> checkpoint_on_two_ranks(const CheckpointRun& run) {
  std::vector<CheckpointOutcome> outcomes(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    outcomes[rank] = checkpoint_run(comm, run);
  });
  return outcomes;
}

TEST_P(LowPrecisionStage, CheckpointsHoldTheMastersWhicheverCollectivesSaveOrLoad) {
  const int stage = GetParam();
  accelerate::testing::TempDir dir("accelerate-lowp");
  const std::string from_bf16 = dir.file("bf16"), from_fp32 = dir.file("fp32");
  const CollectiveDtype bf16 = CollectiveDtype::kBf16;
  // Saved after step 4 of 8, by bf16 and by fp32 collectives.
  const auto bf16_run = checkpoint_on_two_ranks({stage, bf16, "", from_bf16, 0, 8, 3});
  const auto fp32_run = checkpoint_on_two_ranks({stage, {}, "", from_fp32, 0, 4, 3});
  // The saved weights, as each run had them when it saved: fp32 collectives
  // loading the bf16 run's checkpoint...
  const auto fp32_loads_bf16 = checkpoint_on_two_ranks({stage, {}, from_bf16, "", 4, 4});
  // ...and bf16 collectives loading fp32's, and bf16's own, resuming it.
  const auto bf16_loads_fp32 = checkpoint_on_two_ranks({stage, bf16, from_fp32, "", 4, 4});
  const auto bf16_resumes = checkpoint_on_two_ranks({stage, bf16, from_bf16, "", 4, 8});
  for (int rank = 0; rank < 2; ++rank) {
    // From prepare() on, every process computes with rounded weights.
    ASSERT_FALSE(bf16_run[rank].whole_at_start.empty());
    for (const auto& w : bf16_run[rank].whole_at_start) EXPECT_TRUE(bf16_exact(w));
    // fp32 masters were saved and loaded: finer than bf16, and whole.
    expect_bitwise(bf16_loads_fp32[rank].at_start, fp32_run[rank].at_end);
    bool finer = false;
    for (const auto& w : fp32_run[rank].at_end) finer |= !bf16_exact(w);
    EXPECT_TRUE(finer);
    // Every process computes with the loaded masters, rounded.
    ASSERT_FALSE(bf16_loads_fp32[rank].whole_at_start.empty());
    for (const auto& w : bf16_loads_fp32[rank].whole_at_start) EXPECT_TRUE(bf16_exact(w));
    // The bf16 run's checkpoint loads the same without low precision, and
    // resuming it with bf16 collectives goes on bitwise as the run that saved.
    expect_bitwise(fp32_loads_bf16[rank].at_start, bf16_resumes[rank].at_start);
    expect_bitwise(bf16_resumes[rank].at_end, bf16_run[rank].at_end);
    bool saved_finer = false;
    for (const auto& w : bf16_resumes[rank].at_start) saved_finer |= !bf16_exact(w);
    EXPECT_TRUE(saved_finer);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, LowPrecisionStage, ::testing::Values(2, 3),
                         [](const auto& info) { return "Stage" + std::to_string(info.param); });

}  // namespace low_precision_sharding_test
