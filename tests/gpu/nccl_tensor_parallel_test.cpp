// Tensor parallelism over NCCL: a tiny Llama split over 2 GPUs (thread
// ranks, one per device), with and without Megatron's sequence parallelism,
// against the unsplit model on the first GPU: the loss, and each rank's part
// of every gradient. Needs 2 GPUs (skipped with a reason otherwise); the same
// comparisons run over Gloo on CPU ranks in tests/models.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "accelerate/models/llama.h"
#include "accelerate/nn/tensor_parallel.h"
#include "gpu/gpu_test_support.h"
#include "models/tiny_llama_config.h"
#include "support/tensor_compare.h"

namespace gpu_nccl_tensor_parallel_test {

namespace am = accelerate::models;
using accelerate::Communicator;
using accelerate::TensorParallel;
using namespace accelerate::testing;

am::LlamaConfig tiny_config() { return tiny_llama_config(48, 16); }

at::Tensor ids() { return (at::arange(32, at::kLong) * 7 + 3).remainder(48).reshape({2, 16}); }

using accelerate::testing::tensor_parallel_part_of;

TEST(NcclTensorParallel, ALlamaSplitOverTwoGpusEqualsTheUnsplitModel) {
  ACCELERATE_GPU_REQUIRE_GPUS(2);
  torch::manual_seed(3);
  am::LlamaForCausalLM whole(tiny_config());
  std::vector<at::Tensor> initial;
  for (const auto& p : whole->parameters()) initial.push_back(p.detach().clone());
  whole->to(cuda_device(0));
  const at::Tensor batch = ids().to(cuda_device(0));
  const at::Tensor expected = whole->loss(batch, batch);
  expected.backward();
  const std::vector<at::Tensor> whole_grads = [&] {
    std::vector<at::Tensor> grads;
    for (const auto& p : whole->parameters()) grads.push_back(p.grad().cpu());
    return grads;
  }();
  for (bool sequence_parallel : {false, true}) {
    run_cuda_ranks(2, [&](std::shared_ptr<Communicator> comm) {
      const c10::Device device = cuda_device(comm->rank());
      am::LlamaForCausalLM model(tiny_config());
      {
        torch::NoGradGuard no_grad;
        const auto parameters = model->parameters();
        for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(initial[i]);
      }
      const TensorParallel tp(comm, sequence_parallel);
      model->parallelize(tp);
      model->to(device);
      const at::Tensor loss = model->loss(ids().to(device), ids().to(device));
      const std::string where = std::string(sequence_parallel ? "sequence parallel" : "plain") +
                                ", rank " + std::to_string(comm->rank());
      EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5 * expected.item<double>())
          << where;
      loss.backward();
      const auto parameters = model->parameters();
      for (size_t i = 0; i < parameters.size(); ++i) {
        const at::Tensor grad = parameters[i].grad().cpu();
        const at::Tensor reference = tensor_parallel_part_of(whole_grads[i], grad, tp);
        const double scale = std::max(reference.abs().max().item<double>(), 1e-12);
        EXPECT_LE((grad - reference).abs().max().item<double>() / scale, 1e-4)
            << where << ", parameter " << i;
      }
    });
  }
}

}  // namespace gpu_nccl_tensor_parallel_test
