// Small deterministic models and reference computations shared by the
// gradient-sync tests. Ranks are threads of one process, so nothing here
// touches torch's global random generator: weights come from a formula and
// data from a private generator per rank.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "accelerate/distributed/communicator.h"
#include "accelerate/parallel/gradient_reducer.h"

namespace accelerate {
namespace testing {

// Weights from sin(): identical on every rank unless `salt` differs.
inline void fill_deterministic(torch::nn::Module& module, double salt = 0) {
  torch::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : module.parameters()) {
    auto values =
        torch::arange(p.numel(), torch::kDouble).mul(0.37).add(1.3 * k + salt).sin().mul(0.5);
    p.copy_(values.view(p.sizes()).to(p.scalar_type()));
    ++k;
  }
}

inline torch::Tensor rank_data(int rank, int step, std::vector<int64_t> sizes) {
  auto generator = at::detail::createCPUGenerator(1000 * rank + step + 1);
  return torch::randn(sizes, generator);
}

// Registration order (parameter index: name):
//   0 fc1.weight [16,8]   1 fc1.bias [16]
//   2 frozen.weight [16,16] 3 frozen.bias [16]   (requires_grad false)
//   4 branch.weight [16,16] 5 branch.bias [16]   (used only when asked)
//   6 fc2.weight [16,16]  7 fc2.bias [16]
//   8 head.weight [4,16]  9 head.bias [4]
struct BranchyNetImpl : torch::nn::Module {
  BranchyNetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(8, 16))),
        frozen(register_module("frozen", torch::nn::Linear(16, 16))),
        branch(register_module("branch", torch::nn::Linear(16, 16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 16))),
        head(register_module("head", torch::nn::Linear(16, 4))) {
    fill_deterministic(*this);
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_branch) {
    auto h = torch::tanh(fc1(x));
    h = frozen(h);
    if (use_branch) h = h + torch::tanh(branch(h));
    h = torch::tanh(fc2(h));
    return head(h);
  }
  torch::nn::Linear fc1, frozen, branch, fc2, head;
};
TORCH_MODULE(BranchyNet);

constexpr std::size_t kBranchWeight = 4;
constexpr std::size_t kBranchBias = 5;
constexpr std::size_t kFrozenWeight = 2;

inline void clear_grads(torch::nn::Module& module) {
  for (auto& p : module.parameters()) p.mutable_grad().reset();
}

// One local forward/backward of BranchyNet on this rank's data for `step`.
inline torch::Tensor branchy_loss(BranchyNet& net, int rank, int step, bool use_branch) {
  auto x = rank_data(rank, step, {6, 8});
  auto target = rank_data(rank, 100 + step, {6, 4});
  return (net->forward(x, use_branch) - target).pow(2).mean();
}

// The oracle: each trainable parameter's local gradient (zero if none),
// all-reduced on its own with a blocking SUM, divided by the world size.
inline std::vector<torch::Tensor> blocking_average(Communicator& comm,
                                                   const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> averaged;
  for (const auto& p : params) {
    if (!p.requires_grad()) {
      averaged.push_back(p.grad());
      continue;
    }
    auto g = p.grad().defined() ? p.grad().clone() : torch::zeros_like(p);
    comm.all_reduce(g, ReduceOp::kSum);
    averaged.push_back(g.div_(comm.world_size()));
  }
  return averaged;
}

// Per parameter: the sum over ranks of |local gradient| (undefined for frozen
// parameters). Bounds the rounding error of any order of summation.
inline std::vector<torch::Tensor> blocking_magnitude(Communicator& comm,
                                                     const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> magnitudes;
  for (const auto& p : params) {
    if (!p.requires_grad()) {
      magnitudes.emplace_back();
      continue;
    }
    auto m = p.grad().defined() ? p.grad().abs() : torch::zeros_like(p);
    comm.all_reduce(m, ReduceOp::kSum);
    magnitudes.push_back(m);
  }
  return magnitudes;
}

// Largest distance in units in the last place between two float tensors
// (0 means bitwise equal).
inline int64_t max_ulp_distance(const torch::Tensor& a, const torch::Tensor& b) {
  auto ia = a.contiguous().to(torch::kFloat).view(torch::kInt).to(torch::kLong);
  auto ib = b.contiguous().to(torch::kFloat).view(torch::kInt).to(torch::kLong);
  // Map the sign-magnitude bit patterns onto a monotonic integer line.
  auto line = [](const torch::Tensor& bits) {
    return torch::where(bits < 0, -(bits & 0x7fffffff), bits);
  };
  if (a.numel() == 0) return 0;
  return (line(ia) - line(ib)).abs().max().item<int64_t>();
}

inline std::string describe(const torch::Tensor& t) {
  return t.defined() ? c10::str(t.sizes()) : std::string("undefined");
}

}  // namespace testing
}  // namespace accelerate
