// Several backward passes into the same model before one optimizer step, as
// in GAN training: two prepared models, two prepared optimizers, three
// backward passes per step (the discriminator on real data, on generated
// data, then the generator's loss flowing through the discriminator). On N
// ranks with batch 8 each, training must match one process with batch 8·N.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "accelerate/accelerator/accelerator.h"
#include "support/thread_ranks.h"

namespace {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;

// Real samples near the circle of radius 2, and the generator's noise for
// each of them: example i = (real_i, noise_i), so every rank feeds its
// samples the same noise as the one-process run does.
accelerate::TensorDataset gan_data(int64_t samples) {
  auto generator = at::detail::createCPUGenerator(77);
  auto angle = at::rand({samples, 1}, generator) * 6.2831853;
  auto real =
      at::cat({angle.cos(), angle.sin()}, 1) * 2.0 + 0.05 * at::randn({samples, 2}, generator);
  auto noise = at::randn({samples, 2}, generator);
  return accelerate::TensorDataset(real, noise);
}

// Parameters drawn from a private generator: the same model on every rank
// (ranks are threads and share torch's global generator).
template <class Module>
Module gan_seeded(Module module, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  for (auto& parameter : module->parameters()) {
    parameter.copy_(at::randn(parameter.sizes(), generator) * 0.5);
  }
  return module;
}

torch::nn::Sequential generator_model() {
  return gan_seeded(
      torch::nn::Sequential(torch::nn::Linear(2, 8), torch::nn::Tanh(), torch::nn::Linear(8, 2)),
      5);
}
torch::nn::Sequential discriminator_model() {
  return gan_seeded(
      torch::nn::Sequential(torch::nn::Linear(2, 8), torch::nn::ReLU(), torch::nn::Linear(8, 1)),
      6);
}

struct Trained {
  std::vector<at::Tensor> generator;
  std::vector<at::Tensor> discriminator;
};

std::vector<at::Tensor> gan_snapshot(const torch::nn::Sequential& model) {
  std::vector<at::Tensor> out;
  for (const auto& parameter : model->parameters()) out.push_back(parameter.detach().clone());
  return out;
}

at::Tensor bce(const at::Tensor& logits, double label) {
  return torch::binary_cross_entropy_with_logits(logits, torch::full_like(logits, label));
}

// The GAN step. `backward(loss, pass)` is loss.backward() or
// accelerator.backward(loss); pass 0, 1, 2 in each step.
template <class Optimizer, class Backward>
void gan_epoch(torch::nn::Sequential& g, torch::nn::Sequential& d, Optimizer& g_optimizer,
               Optimizer& d_optimizer, accelerate::DataLoader<accelerate::TensorDataset>& loader,
               Backward&& backward) {
  for (auto& batch : loader) {
    d_optimizer.zero_grad();
    backward(bce(d->forward(batch.data), 1.0), 0);  // the discriminator on real data
    auto fake = g->forward(batch.target);
    backward(bce(d->forward(fake.detach()), 0.0), 1);  // ...on generated data
    d_optimizer.step();
    g_optimizer.zero_grad();
    backward(bce(d->forward(fake), 1.0), 2);  // the generator, through the discriminator
    g_optimizer.step();
  }
}

Trained train_gan_reference(int64_t samples, size_t batch) {
  auto g = generator_model();
  auto d = discriminator_model();
  torch::optim::Adam g_optimizer(g->parameters(), torch::optim::AdamOptions(0.01));
  torch::optim::Adam d_optimizer(d->parameters(), torch::optim::AdamOptions(0.01));
  accelerate::DataLoader loader(gan_data(samples), accelerate::DataLoaderOptions(batch));
  for (int epoch = 0; epoch < 2; ++epoch) {
    gan_epoch(g, d, g_optimizer, d_optimizer, loader,
              [](const at::Tensor& loss, int) { loss.backward(); });
  }
  return {gan_snapshot(g), gan_snapshot(d)};
}

// first_pass_without_sync: the first discriminator pass runs in no_sync (its
// gradients are synced with the second's), which saves one sync per step.
Trained train_gan_accelerated(std::shared_ptr<Communicator> comm, int64_t samples, size_t batch,
                              bool first_pass_without_sync) {
  Accelerator accelerator(std::move(comm), AcceleratorOptions());
  auto g = generator_model();
  auto d = discriminator_model();
  torch::optim::Adam g_optimizer(g->parameters(), torch::optim::AdamOptions(0.01));
  torch::optim::Adam d_optimizer(d->parameters(), torch::optim::AdamOptions(0.01));
  accelerate::DataLoader loader(gan_data(samples), accelerate::DataLoaderOptions(batch));
  accelerator.prepare(g, d, g_optimizer, d_optimizer, loader);
  for (int epoch = 0; epoch < 2; ++epoch) {
    gan_epoch(g, d, g_optimizer, d_optimizer, loader, [&](const at::Tensor& loss, int pass) {
      if (first_pass_without_sync && pass == 0) {
        auto scope = accelerator.no_sync();
        accelerator.backward(loss);
      } else {
        accelerator.backward(loss);
      }
    });
  }
  return {gan_snapshot(g), gan_snapshot(d)};
}

void expect_gan_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i], want[i], /*rtol=*/1e-4, /*atol=*/1e-5))
        << what << " parameter " << i << ":\n"
        << got[i] << "\nvs\n"
        << want[i];
  }
}

class MultiBackward : public ::testing::TestWithParam<int> {};

void expect_gan_matches_reference(int n, bool first_pass_without_sync) {
  const auto reference = train_gan_reference(24 * n, 8 * n);
  const auto untrained = discriminator_model();
  EXPECT_FALSE(torch::allclose(reference.discriminator[0], untrained->parameters()[0]))
      << "the reference trained";
  ::testing::internal::CaptureStderr();
  accelerate::testing::run_rank_communicators(n, [&](std::shared_ptr<Communicator> comm) {
    const auto trained = train_gan_accelerated(comm, 24 * n, 8, first_pass_without_sync);
    expect_gan_close(trained.generator, reference.generator, "generator");
    expect_gan_close(trained.discriminator, reference.discriminator, "discriminator");
  });
  // A backward pass that does not reach a model (the generator during the
  // discriminator's passes) is not a case of unused parameters.
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed.find("received no gradient"), std::string::npos) << printed;
}

TEST_P(MultiBackward, GanStepsOnRanksMatchOneProcessWithTheGlobalBatch) {
  expect_gan_matches_reference(GetParam(), /*first_pass_without_sync=*/false);
}

TEST_P(MultiBackward, NoSyncForTheFirstDiscriminatorPassGivesTheSameTraining) {
  expect_gan_matches_reference(GetParam(), /*first_pass_without_sync=*/true);
}

INSTANTIATE_TEST_SUITE_P(Ranks, MultiBackward, ::testing::Values(1, 2, 3));

// pytorch/examples' DCGAN shape: BatchNorm in both models. The generator's
// graph (which saved its running statistics) is still pending while the
// discriminator's synced backward passes run; overwriting the generator's
// buffers then failed its backward with "modified by an inplace operation".
torch::nn::Sequential batch_norm_generator() {
  return gan_seeded(torch::nn::Sequential(torch::nn::Linear(2, 8), torch::nn::BatchNorm1d(8),
                                          torch::nn::Tanh(), torch::nn::Linear(8, 2)),
                    5);
}
torch::nn::Sequential batch_norm_discriminator() {
  return gan_seeded(torch::nn::Sequential(torch::nn::Linear(2, 8), torch::nn::BatchNorm1d(8),
                                          torch::nn::ReLU(), torch::nn::Linear(8, 1)),
                    6);
}

std::vector<at::Tensor> buffers_of(const torch::nn::Sequential& model) {
  std::vector<at::Tensor> out;
  for (const auto& buffer : model->buffers()) out.push_back(buffer.detach().clone());
  return out;
}

TEST(MultiBackwardBuffers, GanWithBatchNormInBothModelsTrainsOnTwoRanksWithEqualBuffers) {
  constexpr int kRanks = 2;
  std::vector<Trained> buffers(kRanks);
  std::vector<Trained> parameters(kRanks);
  std::vector<std::string> failures(kRanks);
  const auto job_of = [](int rank) { return accelerate::testing::thread_rank_job(rank, kRanks); };
  accelerate::testing::run_ranks_of_jobs(
      kRanks, job_of, [&](int rank, std::shared_ptr<Communicator> comm) {
        Accelerator accelerator(std::move(comm), AcceleratorOptions());
        auto g = batch_norm_generator();
        auto d = batch_norm_discriminator();
        torch::optim::Adam g_optimizer(g->parameters(), torch::optim::AdamOptions(0.01));
        torch::optim::Adam d_optimizer(d->parameters(), torch::optim::AdamOptions(0.01));
        // Each rank sees other samples, so the running statistics differ
        // unless they travel.
        accelerate::DataLoader loader(gan_data(48), accelerate::DataLoaderOptions(8));
        accelerator.prepare(g, d, g_optimizer, d_optimizer, loader);
        try {
          for (int epoch = 0; epoch < 2; ++epoch) {
            gan_epoch(g, d, g_optimizer, d_optimizer, loader,
                      [&](const at::Tensor& loss, int) { accelerator.backward(loss); });
          }
        } catch (const std::exception& e) {
          failures[rank] = e.what();
          throw;
        }
        buffers[rank] = {buffers_of(g), buffers_of(d)};
        parameters[rank] = {gan_snapshot(g), gan_snapshot(d)};
      });
  for (int rank = 0; rank < kRanks; ++rank) ASSERT_EQ(failures[rank], "") << "rank " << rank;
  // The statistics moved away from their initial values (mean 0)...
  ASSERT_GT(buffers[0].generator[0].abs().max().item<float>(), 0.0f);
  ASSERT_GT(buffers[0].discriminator[0].abs().max().item<float>(), 0.0f);
  // ...and every rank holds rank 0's, bit for bit, as it holds its weights.
  for (const auto* what : {"generator", "discriminator"}) {
    const bool generator = std::string(what) == "generator";
    const auto& want = generator ? buffers[0].generator : buffers[0].discriminator;
    const auto& got = generator ? buffers[1].generator : buffers[1].discriminator;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(torch::equal(got[i], want[i])) << what << " buffer " << i;
    }
    const auto& want_weights = generator ? parameters[0].generator : parameters[0].discriminator;
    const auto& got_weights = generator ? parameters[1].generator : parameters[1].discriminator;
    for (size_t i = 0; i < got_weights.size(); ++i) {
      EXPECT_TRUE(torch::equal(got_weights[i], want_weights[i])) << what << " parameter " << i;
    }
  }
}

}  // namespace
