// qgZ's two-level reduce-scatter (quantized_reduce_scatter_two_level), as
// DeepSpeed runs it across machines: thread ranks acting as machines of G
// processes. The result is bitwise the same arithmetic done locally (each
// row quantized by its sender, summed in fp32 inside the machine in
// local-rank order, quantized again, summed across machines in machine
// order), within the two quantizations' bound of the exact sum; a NaN
// reaches its owner; only 1/G of the bytes cross machines; and ZeRO-3
// training with qgZ on two machines keeps every process's weights equal and
// close to unquantized training.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/distributed/communication_traffic.h"
#include "quantize/block_quantize.h"
#include "sharding/hpz_test_support.h"
#include "sharding/quantized_collectives.h"
#include "sharding/smooth_net.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace quantized_two_level_test {

using accelerate::Communicator;
using accelerate::quantize::QuantBits;
using accelerate::sharding::QuantizedWire;

at::Tensor row_values(int rank, int64_t numel) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(900 + rank);
  return at::randn({numel}, generator) * at::pow(10.0, at::randint(-2, 2, {numel}, generator));
}

at::Tensor roundtrip(const at::Tensor& values, const QuantizedWire& wire) {
  return accelerate::quantize::dequantize(
      accelerate::quantize::quantize(values.contiguous(), wire.bits, wire.block_size),
      values.numel(), wire.bits, wire.block_size, at::kFloat);
}

// Runs `body(comm, machine, across)` on `machines` x `per_machine` thread
// ranks numbered as launchers do, Gloo collectives.
template <class Body>
void on_machines(int machines, int per_machine, Body body) {
  const int world = machines * per_machine;
  accelerate::testing::run_ranks_of_jobs(
      world,
      [&](int rank) {
        auto job = accelerate::testing::machine_rank_job(rank, world, per_machine);
        job.shared_memory_all_reduce = false;
        return job;
      },
      [&](int, std::shared_ptr<Communicator> comm) {
        std::vector<std::vector<int>> by_machine(machines), by_local(per_machine);
        for (int r = 0; r < world; ++r) {
          by_machine[r / per_machine].push_back(r);
          by_local[r % per_machine].push_back(r);
        }
        auto machine = comm->split(by_machine);
        auto across = comm->split(by_local);
        body(*comm, *machine, *across);
      });
}

struct Shape {
  int machines, per_machine;
};

class TwoLevel : public ::testing::TestWithParam<Shape> {};

TEST_P(TwoLevel, IsTheMachineThenAcrossSumOfDequantizedRowsBitwise) {
  const Shape s = GetParam();
  const int world = s.machines * s.per_machine;
  const QuantizedWire wire{QuantBits::kInt4, 64};
  const int64_t n = 1000;  // a short last block
  std::vector<at::Tensor> buffers;
  for (int r = 0; r < world; ++r) buffers.push_back(row_values(r, world * n));
  const auto row = [&](int sender, int owner) { return buffers[sender].narrow(0, owner * n, n); };
  std::vector<at::Tensor> expected(world);
  for (int owner = 0; owner < world; ++owner) {
    at::Tensor sum = at::zeros({n});
    for (int m = 0; m < s.machines; ++m) {
      at::Tensor partial = at::zeros({n});
      for (int i = 0; i < s.per_machine; ++i)
        partial.add_(roundtrip(row(m * s.per_machine + i, owner), wire));
      sum.add_(roundtrip(partial, wire));
    }
    expected[owner] = sum;
  }
  on_machines(
      s.machines, s.per_machine,
      [&](Communicator& comm, Communicator& machine, Communicator& across) {
        at::Tensor shard = at::empty({n});
        accelerate::sharding::quantized_reduce_scatter_two_level(
            machine, across, buffers[comm.rank()], shard, "qgZ", wire)
            .wait();
        EXPECT_TRUE(shard.equal(expected[comm.rank()])) << "rank " << comm.rank();
        // Within both quantizations of the exact sum: each sender's row moves
        // at most half an int4 step of its block (max/14), each machine's
        // partial sum half a step of its own block, plus fp32's roundings.
        at::Tensor exact = at::zeros({n}, at::kDouble), bound = at::zeros({n}, at::kDouble);
        for (int m = 0; m < s.machines; ++m) {
          at::Tensor partial = at::zeros({n}, at::kDouble);
          for (int i = 0; i < s.per_machine; ++i) {
            const at::Tensor r = row(m * s.per_machine + i, comm.rank()).to(at::kDouble);
            exact.add_(r);
            partial.add_(r);
            for (int64_t b = 0; b < n; b += 64) {
              const int64_t len = std::min<int64_t>(64, n - b);
              bound.narrow(0, b, len).add_(r.narrow(0, b, len).abs().max() / 14);
            }
          }
          for (int64_t b = 0; b < n; b += 64) {
            const int64_t len = std::min<int64_t>(64, n - b);
            // The partial that was quantized is within the first bound of this.
            bound.narrow(0, b, len).add_(
                (partial.narrow(0, b, len).abs().max() + bound.narrow(0, b, len).max()) / 14);
          }
        }
        bound = bound * (1 + 1e-5) + exact.abs() * 1e-5;
        EXPECT_TRUE(((shard.to(at::kDouble) - exact).abs() <= bound).all().item<bool>())
            << "rank " << comm.rank();
      });
}

INSTANTIATE_TEST_SUITE_P(Machines, TwoLevel,
                         ::testing::Values(Shape{2, 2}, Shape{3, 2}, Shape{2, 3}),
                         [](const auto& info) {
                           return std::to_string(info.param.machines) + "MachinesOf" +
                                  std::to_string(info.param.per_machine);
                         });

TEST(TwoLevelQgz, ANaNReachesItsOwnerAndOneGthOfTheBytesCrossMachines) {
  const int machines = 2, per_machine = 2, world = 4;
  const QuantizedWire wire{QuantBits::kInt4, 64};
  const int64_t n = 128;
  on_machines(
      machines, per_machine, [&](Communicator& comm, Communicator& machine, Communicator& across) {
        at::Tensor buffer = at::ones({world * n});
        // Rank 1 poisons rank 2's row (another machine), rank 3 rank 0's.
        if (comm.rank() == 1) buffer[2 * n + 5] = std::numeric_limits<float>::quiet_NaN();
        if (comm.rank() == 3) buffer[0 * n + 70] = std::numeric_limits<float>::infinity();
        comm.reset_traffic();
        at::Tensor shard = at::empty({n});
        accelerate::sharding::quantized_reduce_scatter_two_level(machine, across, buffer, shard,
                                                                 "qgZ", wire)
            .wait();
        if (comm.rank() == 2) EXPECT_TRUE(std::isnan(shard[5].item<float>()));
        if (comm.rank() == 0) EXPECT_TRUE(std::isnan(shard[70].item<float>()));
        if (comm.rank() == 1 || comm.rank() == 3) {
          EXPECT_TRUE(shard.eq(4).all().item<bool>()) << "rank " << comm.rank();
        }
        // A row of n int4 values: n/2 bytes and a scale per block of 64.
        const double row_bytes = n / 2 + 4 * (n / 64);
        const accelerate::TrafficCount total = accelerate::total(comm.traffic());
        // Inside: one row per machine to the local peer; across: one row to
        // the other machine (the one-level form sends it two).
        EXPECT_EQ(total.bytes_sent, static_cast<uint64_t>(machines * row_bytes + row_bytes));
        EXPECT_EQ(total.bytes_sent_off_machine, static_cast<uint64_t>(row_bytes));
      });
}

// Stage 3 with qgZ on two machines of two (the smooth tanh model the ZeRO++
// tests train): every process ends with the same weights, close to stage 3
// without quantization.
std::vector<at::Tensor> train_blocks(std::shared_ptr<Communicator> comm, bool qgz) {
  accelerate::testing::TempDir dir("accelerate-two-level-" + std::to_string(comm->rank()));
  const std::string path = dir.path() + "/ds.json";
  std::ofstream(path) << "{\"train_micro_batch_size_per_gpu\": 8, \"zero_optimization\": "
                         "{\"stage\": 3, \"zero_quantized_gradients\": "
                      << (qgz ? "true" : "false") << "}}\n";
  accelerate::AcceleratorOptions options;
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  options.deepspeed_plugin(
      accelerate::DeepSpeedPlugin().hf_ds_config(path).gradient_clipping(std::nullopt));
  accelerate::Accelerator accelerator(comm, options);
  sharding_test_models::SmoothNet model;
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.02));
  accelerator.prepare(model, optimizer);
  auto generator = at::detail::createCPUGenerator(31 + comm->rank());
  for (int step = 0; step < 10; ++step) {
    const at::Tensor x = at::randn({8, 4}, generator);
    accelerator.backward(torch::mse_loss(model->forward(x), torch::sin(x.sum(1, true))));
    optimizer.step();
    optimizer.zero_grad();
  }
  std::vector<at::Tensor> weights;
  for (const auto& entry : accelerator.get_state_dict(model)) weights.push_back(entry.second);
  return weights;
}

TEST(TwoLevelQgz, TrainsTheSameWeightsOnEveryProcessCloseToUnquantized) {
  std::vector<std::vector<at::Tensor>> plain(4), quantized(4);
  for (bool qgz : {false, true}) {
    accelerate::testing::run_ranks_of_jobs(
        4,
        [](int rank) {
          auto job = accelerate::testing::machine_rank_job(rank, 4, 2);
          job.shared_memory_all_reduce = false;
          return job;
        },
        [&](int rank, std::shared_ptr<Communicator> comm) {
          (qgz ? quantized : plain)[rank] = train_blocks(std::move(comm), qgz);
        });
  }
  double worst = 0;
  ASSERT_FALSE(quantized[0].empty());
  for (std::size_t i = 0; i < plain[0].size(); ++i) {
    for (int r = 1; r < 4; ++r) EXPECT_TRUE(plain[r][i].equal(plain[0][i])) << "plain " << i;
  }
  for (std::size_t i = 0; i < quantized[0].size(); ++i) {
    for (int r = 1; r < 4; ++r) EXPECT_TRUE(quantized[r][i].equal(quantized[0][i])) << i;
    ASSERT_TRUE(at::isfinite(quantized[0][i]).all().item<bool>()) << i;
    worst = std::max(worst, (quantized[0][i] - plain[0][i]).abs().max().item<double>());
  }
  std::cout << "two-level qgZ, 2 machines of 2, 10 SGD steps: largest weight difference vs "
               "unquantized "
            << worst << "\n";
  EXPECT_GT(worst, 0.0);  // the gradients were quantized
  // Each step moves a weight by lr x (gradient error); the two int4
  // roundings are at most 1/14 of a block's largest gradient each, which
  // on this model (gradients below ~1) bounds 10 steps by 10 x 0.02 x 2/14.
  EXPECT_LT(worst, 10 * 0.02 * 2.0 / 14);
}

}  // namespace quantized_two_level_test
