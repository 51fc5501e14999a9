// accelerate-sanity-check: the program `accelerate test` launches on every
// process with the user's settings. Each check exercises one thing a real
// training job relies on, and the main process prints one line per check.
// Every rank decides its own pass/fail; a MIN all-reduce of the verdicts
// makes the printed result true for all ranks. A failing rank also prints
// why, so the launcher's [rank N] prefix shows where it went wrong. Exit
// code: 0 when every check passed on every rank, 1 otherwise.
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <accelerate/accelerate.h>

#include "common/settings.h"

namespace {

using accelerate::Accelerator;

// A check returns "" on success, else what was wrong on this rank.
struct Check {
  const char* name;
  std::string (*run)(Accelerator& accelerator);
};

// "[1, 2.5, 3]": the values only, on one line.
std::string describe(const at::Tensor& tensor) {
  auto values = tensor.detach().cpu().flatten().to(at::kDouble).contiguous();
  std::ostringstream out;
  out << "[";
  for (int64_t i = 0; i < values.numel(); ++i)
    out << (i ? ", " : "") << values.data_ptr<double>()[i];
  out << "]";
  return out.str();
}

std::string expect_equal(const char* what, const at::Tensor& got, const at::Tensor& want) {
  // On the CPU in double: collectives may run on the accelerator's device.
  auto got_cpu = got.detach().cpu().to(at::kDouble);
  auto want_cpu = want.detach().cpu().to(at::kDouble);
  if (got_cpu.sizes() == want_cpu.sizes() && at::allclose(got_cpu, want_cpu, 1e-5, 1e-6)) {
    return "";
  }
  return std::string(what) + ": got " + describe(got) + ", expected " + describe(want);
}

std::string check_process_indices(Accelerator& accelerator) {
  const int n = accelerator.num_processes();
  const int rank = accelerator.process_index();
  auto ranks = accelerate::gather_object(accelerator.communicator(), rank);
  for (int i = 0; i < n; ++i) {
    if (static_cast<int>(ranks.size()) != n || ranks[i] != i) {
      return "process indices gathered out of order or duplicated";
    }
  }
  if (accelerator.is_main_process() != (rank == 0))
    return "is_main_process disagrees with the index";
  if (accelerator.is_last_process() != (rank == n - 1))
    return "is_last_process disagrees with the index";
  if (accelerator.local_process_index() >= accelerator.state().local_world_size) {
    return "local process index outside the local world size";
  }
  return "";
}

std::string check_all_reduce(Accelerator& accelerator) {
  const double n = accelerator.num_processes();
  const double r = accelerator.process_index();
  auto mine = at::tensor({r + 1, 2 * (r + 1)}, at::kFloat).to(accelerator.device());
  std::string problem = expect_equal("sum", accelerator.reduce(mine, accelerate::ReduceOp::kSum),
                                     at::tensor({n * (n + 1) / 2, n * (n + 1)}, at::kFloat));
  if (problem.empty()) {
    problem = expect_equal("mean", accelerator.reduce(mine, accelerate::ReduceOp::kMean),
                           at::tensor({(n + 1) / 2, n + 1}, at::kFloat));
  }
  if (problem.empty()) {
    problem = expect_equal("max", accelerator.reduce(mine, accelerate::ReduceOp::kMax),
                           at::tensor({n, 2 * n}, at::kFloat));
  }
  return problem;
}

std::string check_gather(Accelerator& accelerator) {
  // Accelerate's tested value: gather(arange(N) + 1 + N*rank) is 1..N^2.
  const int64_t n = accelerator.num_processes();
  auto mine =
      (at::arange(n, at::kLong) + 1 + n * accelerator.process_index()).to(accelerator.device());
  std::string problem =
      expect_equal("gather", accelerator.gather(mine), at::arange(1, n * n + 1, at::kLong));
  if (!problem.empty()) return problem;
  // Unequal lengths: rank r contributes r+1 copies of r.
  auto uneven = at::full({accelerator.process_index() + 1}, accelerator.process_index(), at::kLong)
                    .to(accelerator.device());
  auto gathered = accelerate::gather(accelerator.communicator(), uneven);
  std::vector<int64_t> want;
  for (int64_t r = 0; r < n; ++r) want.insert(want.end(), static_cast<size_t>(r + 1), r);
  return expect_equal("gather of unequal lengths", gathered, at::tensor(want, at::kLong));
}

std::string check_broadcast(Accelerator& accelerator) {
  auto mine =
      at::full({3}, 100.0 + accelerator.process_index(), at::kFloat).to(accelerator.device());
  auto from_main = accelerate::broadcast(accelerator.communicator(), mine, 0);
  std::string problem =
      expect_equal("broadcast from process 0", from_main, at::full({3}, 100.0, at::kFloat));
  if (!problem.empty()) return problem;
  const int last = accelerator.num_processes() - 1;
  auto word = accelerate::broadcast_object(
      accelerator.communicator(), "hello from " + std::to_string(accelerator.process_index()),
      last);
  if (word != "hello from " + std::to_string(last))
    return "broadcast_object from the last process gave '" + word + "'";
  return "";
}

// A tiny regression, prepared like a user's model: weights must be broadcast
// by prepare(), the loader must shard the data, and after backward() every
// rank must hold the gradient of the loss over all ranks' batches.
std::string check_training(Accelerator& accelerator) {
  const int64_t n = accelerator.num_processes();
  const int64_t samples = 8 * n;
  auto x = at::arange(samples * 2, at::kFloat).reshape({samples, 2}) / 10.0;
  auto y = x.sum(1, true) * 0.5 + 1.0;

  torch::nn::Linear model(2, 1);
  {
    torch::NoGradGuard no_grad;
    model->weight.fill_(0.1 * (accelerator.process_index() + 1));  // differs per rank on purpose
    model->bias.fill_(-0.2);
  }
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.05));
  accelerate::DataLoader loader(accelerate::TensorDataset(x, y), accelerate::DataLoaderOptions(4));
  accelerator.prepare(model, optimizer, loader);

  auto& comm = accelerator.communicator();
  std::string problem =
      expect_equal("weights after prepare (broadcast from process 0)", model->weight.detach().cpu(),
                   at::full({1, 2}, 0.1, at::kFloat));
  std::vector<at::Tensor> seen;
  for (auto& batch : loader) {
    // The reference: the same model's gradient over every rank's batch.
    auto all_data = accelerator.gather(batch.data).cpu();
    auto all_target = accelerator.gather(batch.target).cpu();
    auto weight = model->weight.detach().cpu().clone().requires_grad_(true);
    auto bias = model->bias.detach().cpu().clone().requires_grad_(true);
    torch::mse_loss(at::addmm(bias, all_data, weight.t()), all_target).backward();

    accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
    if (problem.empty()) {
      problem = expect_equal("synced weight gradient vs the all-ranks gradient",
                             model->weight.grad().cpu(), weight.grad());
    }
    if (problem.empty()) {
      problem = expect_equal("synced bias gradient vs the all-ranks gradient",
                             model->bias.grad().cpu(), bias.grad());
    }
    optimizer.step();
    optimizer.zero_grad();
    seen.push_back(batch.data);
  }
  // Sharding: together the ranks saw every sample exactly once.
  auto everything = accelerate::gather(comm, at::cat(seen)).cpu().select(1, 0);
  if (problem.empty()) {
    problem = expect_equal("samples seen by all processes (sorted)", std::get<0>(everything.sort()),
                           x.select(1, 0));
  }
  // After training every rank holds the same parameters.
  auto params = at::cat({model->weight.detach().flatten(), model->bias.detach()});
  auto everyone = accelerate::gather_list(comm, params);
  if (problem.empty())
    problem = expect_equal("parameters after training vs process 0", params, everyone[0]);
  return problem;
}

const Check kChecks[] = {
    {"process indices (gather_object, main/last process)", check_process_indices},
    {"all-reduce (sum, mean, max)", check_all_reduce},
    {"gather (equal and unequal lengths)", check_gather},
    {"broadcast (tensor from first, object from last)", check_broadcast},
    {"prepared model: weight broadcast, sharded DataLoader, gradient sync", check_training},
};

}  // namespace

int main() {
  try {
    accelerate::AcceleratorOptions options;
    // A broken setup should fail this test in seconds, not after the
    // 5-minute default, unless the user chose a timeout.
    if (!std::getenv(accelerate::settings::kTimeout.variable())) {
      options.job_options(accelerate::JobOptions().timeout(std::chrono::milliseconds(60'000)));
    }
    Accelerator accelerator(options);
    accelerator.print("accelerate-sanity-check: ", accelerator.num_processes(), " process(es), ",
                      to_string(accelerator.distributed_type()), ", device ",
                      accelerator.device().str(), ", backend ",
                      accelerate::to_string(accelerator.state().backend));
    int failed = 0;
    for (const auto& check : kChecks) {
      const std::string problem = check.run(accelerator);
      if (!problem.empty()) {
        std::cout << "process " << accelerator.process_index() << ": " << check.name << ": "
                  << problem << std::endl;
      }
      // Everyone learns whether every rank passed.
      auto verdict = at::tensor({problem.empty() ? 1 : 0}, at::kInt).to(accelerator.device());
      const bool all_passed =
          accelerator.reduce(verdict, accelerate::ReduceOp::kMin).item<int>() == 1;
      if (!all_passed) ++failed;
      accelerator.print(all_passed ? "  [ok]   " : "  [FAIL] ", check.name);
    }
    accelerator.wait_for_everyone();
    if (failed > 0) {
      accelerator.print("accelerate-sanity-check: ", failed, " check(s) failed");
      return 1;
    }
    accelerator.print("accelerate-sanity-check: all checks passed");
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "accelerate-sanity-check: error: " << error.what() << std::endl;
    return 1;
  }
}
