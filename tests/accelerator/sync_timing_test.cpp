// When gradients are synchronised (docs/accelerator.md): under no_sync the
// ranks' gradients differ, at sync points they match; with accumulation the
// sync happens exactly every num_steps micro-batches and on the last batch;
// optimizers and schedulers step only then, the same count on 1 and 2 ranks.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "accelerate/accelerator/accelerator.h"
#include "support/thread_ranks.h"

namespace {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;

// 10 samples per rank in batches of 2: 5 micro-batches per epoch. The data
// differ per sample, so ranks see different gradients unless synced.
accelerate::TensorDataset ramp(int world_size) {
  auto x = at::arange(10 * world_size, at::kFloat).reshape({-1, 1}) / 10.0;
  return accelerate::TensorDataset(x, 3.0 * x + 1.0);
}

bool grads_match_across_ranks(Accelerator& accelerator, const torch::nn::Linear& model) {
  auto grad = model->weight.grad().reshape({1}).clone();
  auto all = accelerator.gather(grad);
  return torch::equal(all.min(), all.max());
}

struct Record {
  std::vector<bool> synced;       // accelerator.sync_gradients() per micro-batch
  std::vector<bool> grads_match;  // after backward
  int64_t optimizer_steps = 0;
  int64_t scheduler_steps = 0;
};

Record run_epoch(std::shared_ptr<Communicator> comm, int accumulation_steps) {
  AcceleratorOptions options;
  options.gradient_accumulation_steps(accumulation_steps);
  Accelerator accelerator(comm, options);
  torch::nn::Linear model(1, 1);
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.01));
  accelerate::Scheduler<torch::optim::StepLR> scheduler(optimizer, 1, 0.9);
  accelerate::DataLoader loader(ramp(comm->world_size()), accelerate::DataLoaderOptions(2));
  accelerator.prepare(model, optimizer, loader, scheduler);
  Record record;
  for (auto& batch : loader) {
    auto scope = accelerator.accumulate();
    accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
    record.synced.push_back(accelerator.sync_gradients());
    record.grads_match.push_back(grads_match_across_ranks(accelerator, model));
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
  }
  record.optimizer_steps = accelerator.gradient_state()->optimizer_steps();
  record.scheduler_steps = scheduler.steps_taken();
  return record;
}

TEST(SyncTiming, AccumulationSyncsEveryTwoAndOnTheLastBatch) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    auto record = run_epoch(comm, 2);
    // Micro-batches 1..5: sync on 2, 4 and on 5 (the loader's last batch).
    EXPECT_EQ(record.synced, (std::vector<bool>{false, true, false, true, true}));
    EXPECT_EQ(record.grads_match, record.synced);
    EXPECT_EQ(record.optimizer_steps, 3);
    EXPECT_EQ(record.scheduler_steps, 3);
  });
}

TEST(SyncTiming, OneRankStepsTheSameNumberOfTimes) {
  accelerate::testing::run_rank_communicators(1, [](std::shared_ptr<Communicator> comm) {
    auto record = run_epoch(comm, 2);
    EXPECT_EQ(record.synced, (std::vector<bool>{false, true, false, true, true}));
    EXPECT_EQ(record.optimizer_steps, 3);
    EXPECT_EQ(record.scheduler_steps, 3);  // not multiplied by the process count
  });
}

TEST(SyncTiming, WithoutAccumulationEveryStepSyncs) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    auto record = run_epoch(comm, 1);
    EXPECT_EQ(record.synced, std::vector<bool>(5, true));
    EXPECT_EQ(record.grads_match, std::vector<bool>(5, true));
    EXPECT_EQ(record.optimizer_steps, 5);
    EXPECT_EQ(record.scheduler_steps, 5);
  });
}

TEST(SyncTiming, NoSyncDiffersThenTheNextStepCarriesTheSum) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm);
    torch::nn::Linear model(1, 1);
    accelerator.prepare(model);
    auto x = at::full({1, 1}, 1.0f + comm->rank());
    auto loss = [&] { return model->forward(x).sum(); };  // d/dw = x
    {
      auto scope = accelerator.no_sync();
      accelerator.backward(loss());
      EXPECT_FALSE(grads_match_across_ranks(accelerator, model));
      EXPECT_FLOAT_EQ(model->weight.grad().item<float>(), 1.0f + comm->rank());
    }
    accelerator.backward(loss());
    EXPECT_TRUE(grads_match_across_ranks(accelerator, model));
    // Each rank accumulated 2·x locally: mean over ranks of (2, 4) = 3.
    EXPECT_FLOAT_EQ(model->weight.grad().item<float>(), 3.0f);
  });
}

TEST(SyncTiming, TriggerSyncInBackwardOverridesNoSyncOnce) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm);
    torch::nn::Linear model(1, 1);
    accelerator.prepare(model);
    auto x = at::full({1, 1}, 1.0f + comm->rank());
    auto scope = accelerator.no_sync();
    accelerator.trigger_sync_in_backward();
    accelerator.backward(model->forward(x).sum());
    EXPECT_TRUE(grads_match_across_ranks(accelerator, model));
    model->weight.mutable_grad().zero_();
    model->bias.mutable_grad().zero_();
    accelerator.backward(model->forward(x).sum());
    EXPECT_FALSE(grads_match_across_ranks(accelerator, model));
  });
}

TEST(GatherForMetrics, EveryRankSeesEachSampleOnce) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm);
    auto index = at::arange(82, at::kFloat).reshape({-1, 1});
    accelerate::DataLoader loader(accelerate::TensorDataset(index, index),
                                  accelerate::DataLoaderOptions(8));
    accelerator.prepare(loader);
    std::vector<at::Tensor> seen;
    for (auto& batch : loader) seen.push_back(accelerator.gather_for_metrics(batch.data));
    auto all = at::cat(seen).reshape({-1});
    EXPECT_EQ(all.numel(), 82);
    EXPECT_TRUE(torch::equal(std::get<0>(all.sort()), at::arange(82, at::kFloat)));
  });
}

TEST(Prepare, TwiceDoesNotWrapTwice) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm);
    torch::nn::Linear model(2, 2);
    accelerator.prepare(model);
    accelerator.prepare(model);
    EXPECT_EQ(accelerator.reducers().size(), 1u);
    accelerator.backward(model->forward(at::ones({1, 2})).sum());
    EXPECT_TRUE(torch::equal(model->weight.grad(), at::ones({2, 2})));
  });
}

TEST(Prepare, ModelsStartFromRankZerosWeights) {
  accelerate::testing::run_rank_communicators(3, [](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm);
    torch::nn::Linear model(4, 4);
    {
      torch::NoGradGuard no_grad;
      model->weight.fill_(comm->rank());
    }
    accelerator.prepare(model);
    EXPECT_TRUE(torch::equal(model->weight, at::zeros({4, 4})));
  });
}

TEST(Prepare, PlainOptimizerWithAccumulationIsAClearError) {
  accelerate::testing::run_rank_communicators(1, [](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm, AcceleratorOptions().gradient_accumulation_steps(2));
    torch::nn::Linear model(1, 1);
    torch::optim::SGD plain(model->parameters(), torch::optim::SGDOptions(0.1));
    EXPECT_THROW(accelerator.prepare(plain), accelerate::ConfigError);
  });
}

}  // namespace

namespace {

TEST(ClipGradNorm, ReturnsTheGlobalNormOnEveryRank) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm);
    torch::nn::Linear model(torch::nn::LinearOptions(2, 1).bias(false));
    {
      torch::NoGradGuard no_grad;
      model->weight.fill_(0.0);
    }
    accelerator.prepare(model);
    // d(sum(w·x))/dw = x: rank 0 has x = (3, 0), rank 1 has x = (0, 4); the
    // synced gradient is their mean (1.5, 2), whose norm is 2.5.
    auto x = (comm->rank() == 0 ? torch::tensor({3.0f, 0.0f}) : torch::tensor({0.0f, 4.0f}))
                 .reshape({1, 2});
    accelerator.backward(model->forward(x).sum());
    const double norm = accelerator.clip_grad_norm_(model->parameters(), /*max_norm=*/1.0);
    EXPECT_NEAR(norm, 2.5, 1e-6);
    EXPECT_NEAR(model->weight.grad().norm().item<double>(), 1.0, 1e-5);
    accelerator.clip_grad_value_(model->parameters(), 0.1);
    EXPECT_LE(model->weight.grad().abs().max().item<float>(), 0.1f + 1e-7f);
  });
}

TEST(SkipFirstBatches, ResumesInsideTheEpoch) {
  accelerate::testing::run_rank_communicators(1, [](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm);
    auto index = at::arange(16, at::kFloat).reshape({-1, 1});
    accelerate::DataLoader loader(accelerate::TensorDataset(index, index),
                                  accelerate::DataLoaderOptions(4));
    accelerator.prepare(loader);
    std::vector<float> resumed;
    for (auto& batch : accelerator.skip_first_batches(loader, 2)) {
      resumed.push_back(batch.data[0][0].item<float>());
    }
    EXPECT_EQ(resumed, (std::vector<float>{8, 12}));
    // The skip applied to one pass only; the next pass starts at 0 again.
    std::vector<float> next;
    for (auto& batch : loader) next.push_back(batch.data[0][0].item<float>());
    EXPECT_EQ(next, (std::vector<float>{0, 4, 8, 12}));
  });
}

}  // namespace
