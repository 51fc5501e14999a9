// ZeRO++ qwZ / qgZ in the stage-3 engine (DeepSpeed's zero_quantized_weights
// / zero_quantized_gradients): on 2 thread ranks with real collectives,
// every process computes with the same dequantized weights while the
// optimizer steps fp32 masters, training stays within the quantizers' error
// of the unquantized run, the bytes drop to about a fifth, an overflow in one
// process's gradients still makes every process skip the fp16 step, and
// checkpoints hold the masters whichever collectives save or load them.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/distributed/communication_traffic.h"
#include "accelerate/sharding/unit_forward.h"
#include "parallel/storage_release.h"
#include "sharding/hpz_test_support.h"
#include "sharding/parameter_units.h"
#include "sharding/smooth_net.h"
#include "sharding/zero_test_support.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace zeropp_sharding_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::TrafficKind;

// tanh blocks (the repeated blocks DeepSpeed's policy makes units) between
// a root input and output layer, random weights, a smooth regression.
using QNet = sharding_test_models::SmoothNet;

struct Quantized {
  bool weights = false;
  bool gradients = false;
};

// Options from a stage-3 DeepSpeed config file asking for `q`, written into
// `dir`; `fp16`: the GradScaler without autocast (which the CPU lacks).
AcceleratorOptions zeropp_options(const std::string& dir, Quantized q, bool fp16 = false) {
  const std::string path = dir + "/ds.json";
  std::ofstream(path) << "{\"train_micro_batch_size_per_gpu\": 8, \"zero_optimization\": "
                         "{\"stage\": 3, \"zero_quantized_weights\": "
                      << (q.weights ? "true" : "false")
                      << ", \"zero_quantized_gradients\": " << (q.gradients ? "true" : "false")
                      << "}}\n";
  AcceleratorOptions options;
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  options.deepspeed_plugin(DeepSpeedPlugin().hf_ds_config(path).gradient_clipping(std::nullopt));
  if (fp16) {
    options.mixed_precision(accelerate::MixedPrecision::kFP16)
        .autocast_kwargs(accelerate::AutocastOptions().enabled(false));
  }
  return options;
}

struct Outcome {
  std::vector<at::Tensor> whole;        // the parameters each process holds whole (the root's)
  std::vector<at::Tensor> whole_saved;  // get_state_dict's entries of the same parameters
  std::vector<at::Tensor> masters;      // what the optimizer steps
  std::vector<at::Tensor> saved;        // get_state_dict: the exact masters, whole
  std::uint64_t gathered_bytes = 0, reduced_bytes = 0;
  float loss = 0;  // held-out, after training
};

std::uint64_t bytes_of(Communicator& comm, TrafficKind kind) {
  std::uint64_t bytes = 0;
  for (const auto& group : comm.traffic()) bytes += group.of(kind).bytes_sent;
  return bytes;
}

Outcome train_q(std::shared_ptr<Communicator> comm, Quantized q) {
  accelerate::testing::TempDir dir("accelerate-zeropp-" + std::to_string(comm->rank()));
  Accelerator accelerator(comm, zeropp_options(dir.path(), q));
  QNet model;
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.02));
  accelerator.prepare(model, optimizer);
  auto generator = at::detail::createCPUGenerator(9 + comm->rank());
  comm->reset_traffic();
  for (int step = 0; step < 20; ++step) {
    const at::Tensor x = at::randn({8, 4}, generator);
    accelerator.backward(torch::mse_loss(model->forward(x), torch::sin(x.sum(1, true))));
    optimizer.step();
    optimizer.zero_grad();
  }
  Outcome outcome;
  outcome.gathered_bytes = bytes_of(*comm, TrafficKind::kAllGather);
  // qgZ's reduce-scatter is an all-to-all of quantized rows.
  outcome.reduced_bytes =
      bytes_of(*comm, TrafficKind::kReduceScatter) + bytes_of(*comm, TrafficKind::kAllToAll);
  auto held_out = at::detail::createCPUGenerator(1234);
  const at::Tensor x = at::randn({64, 4}, held_out);
  {
    torch::NoGradGuard no_grad;
    outcome.loss = torch::mse_loss(model->forward(x), torch::sin(x.sum(1, true))).item<float>();
  }
  std::vector<std::string> whole_names;
  for (const auto& item : model->named_parameters()) {
    if (accelerate::detail::storage_released(item.value())) continue;
    outcome.whole.push_back(item.value().detach().clone());
    whole_names.push_back(item.key());
  }
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) outcome.masters.push_back(p.detach().clone());
  }
  const auto state = accelerator.get_state_dict(model);
  for (const auto& entry : state) outcome.saved.push_back(entry.second);
  for (const std::string& name : whole_names) {
    for (const auto& entry : state) {
      if (entry.first == name) outcome.whole_saved.push_back(entry.second);
    }
  }
  return outcome;
}

// `through_gloo`: Gloo's collectives, whose traffic counts every byte sent
// (shared memory reads fp32 rows where they lie).
template <class Result, class Body>
std::vector<Result> two_ranks(Body body, bool through_gloo = false) {
  std::vector<Result> results(2);
  accelerate::testing::RankOptions options;
  options.shared_memory_all_reduce = !through_gloo;
  accelerate::testing::run_rank_communicators(
      2, [&](std::shared_ptr<Communicator> comm) { results[comm->rank()] = body(comm); }, options);
  return results;
}

void expect_bitwise(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].equal(b[i])) << "tensor " << i;
}

double largest_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

class ZeroppTraining : public ::testing::TestWithParam<int> {};

// 1: qwZ, 2: qgZ, 3: both.
Quantized quantized_of(int which) { return {(which & 1) != 0, (which & 2) != 0}; }

TEST_P(ZeroppTraining, EqualDequantizedWeightsFp32MastersAndCloseToUnquantized) {
  const Quantized q = quantized_of(GetParam());
  const auto plain = two_ranks<Outcome>([](auto comm) { return train_q(comm, {}); });
  const auto quantized = two_ranks<Outcome>([&](auto comm) { return train_q(comm, q); });
  // Every process computes with the same bits (the root's whole weights;
  // the units are freed between uses).
  ASSERT_FALSE(quantized[0].whole.empty());
  expect_bitwise(quantized[0].whole, quantized[1].whole);
  expect_bitwise(quantized[0].saved, quantized[1].saved);
  for (const auto& m : quantized[0].masters) EXPECT_EQ(m.scalar_type(), at::kFloat);
  // qwZ: the whole weights are the dequantized masters, not the masters
  // (get_state_dict's exact ones); the root parameters come first in both.
  const Outcome& r0 = quantized[0];
  ASSERT_EQ(r0.whole_saved.size(), r0.whole.size());
  // A block's largest magnitude is at most the largest root weight's.
  double largest = 0;
  for (const auto& w : r0.whole_saved) largest = std::max(largest, w.abs().max().item<double>());
  bool whole_rounded = false;
  for (std::size_t i = 0; i < r0.whole.size(); ++i) {
    whole_rounded |= !r0.whole[i].equal(r0.whole_saved[i]);
    // Within half an int8 step (and an fp32 rounding).
    EXPECT_LE((r0.whole[i] - r0.whole_saved[i]).abs().max().item<double>(),
              largest / 127 / 2 * 1.0001);
  }
  EXPECT_EQ(whole_rounded, q.weights);
  // Close to the unquantized run. Bounds from the quantizers' per-block
  // error: qwZ moves a weight (|w| <~ 0.6) by at most |w|max / 254 ~ 2.4e-3,
  // which perturbs each gradient by about as much relative; qgZ moves each
  // sender's gradient element by at most its block's max / 14 (int4's half
  // step), and the two senders' roundings add: with gradients of at most
  // ~0.5, up to 0.07 per element per step, 1.4e-3 of weight after lr 0.02,
  // and over 20 steps at most 0.028 if every rounding went the same way.
  // Roundings to nearest mostly cancel, so the measured differences are far
  // below (printed); the asserted bounds are the worst cases above.
  const double worst = largest_difference(quantized[0].saved, plain[0].saved);
  std::cout << "qwZ " << q.weights << " qgZ " << q.gradients
            << ": largest master difference vs unquantized " << worst << ", held-out loss "
            << quantized[0].loss << " vs " << plain[0].loss << "\n";
  EXPECT_GT(worst, 0.0);  // something was quantized
  EXPECT_LT(worst, q.gradients ? 0.028 + 0.005 : 0.005);
  EXPECT_NEAR(quantized[0].loss, plain[0].loss, 0.05 * plain[0].loss);
}

INSTANTIATE_TEST_SUITE_P(Wires, ZeroppTraining, ::testing::Values(1, 2, 3), [](const auto& info) {
  const int which = info.param;
  return std::string(which == 1 ? "Qwz" : which == 2 ? "Qgz" : "QwzQgz");
});

TEST(ZeroppBytes, QwzAndQgzMoveUnderAThirdOfFp32sBytes) {
  const auto plain = two_ranks<Outcome>([](auto comm) { return train_q(comm, {}); }, true);
  const auto both = two_ranks<Outcome>([](auto comm) { return train_q(comm, {true, true}); }, true);
  for (int rank = 0; rank < 2; ++rank) {
    const double fp32 = static_cast<double>(plain[rank].gathered_bytes + plain[rank].reduced_bytes);
    const double quantized =
        static_cast<double>(both[rank].gathered_bytes + both[rank].reduced_bytes);
    ASSERT_GT(fp32, 0);
    std::cout << "rank " << rank << ": fp32 gathers " << plain[rank].gathered_bytes
              << " + reduce-scatters " << plain[rank].reduced_bytes << " bytes; qwZ+qgZ "
              << both[rank].gathered_bytes << " + " << both[rank].reduced_bytes << " (scales in), "
              << quantized / fp32 << "x\n";
    EXPECT_LE(quantized, 0.3 * fp32);
    // int8 is a quarter of fp32 and int4 an eighth: the scales can only add.
    EXPECT_GE(static_cast<double>(both[rank].gathered_bytes),
              0.25 * static_cast<double>(plain[rank].gathered_bytes));
    EXPECT_GE(static_cast<double>(both[rank].reduced_bytes),
              0.125 * static_cast<double>(plain[rank].reduced_bytes));
  }
}

// fp16 loss scaling with qgZ (and qwZ): at step 2 the last rank's loss gets
// inf times the first unit's output (inf/NaN gradients in every bucket of
// it, so in every process's shard) or times the output bias (one element,
// in one process's shard), so only that rank computes an overflow. qgZ sends the blocks holding it
// as NaN, so the shard's owner sees the overflow; the engine's all-reduce of
// found_inf makes every process skip the step and back the scale off.
struct SkipOutcome {
  std::vector<at::Tensor> before, after;  // whole weights around the poisoned step
  double scale = 0;
};

SkipOutcome skip_run(std::shared_ptr<Communicator> comm, bool whole_unit) {
  accelerate::testing::TempDir dir("accelerate-zeropp-fp16-" + std::to_string(comm->rank()));
  Accelerator accelerator(comm, zeropp_options(dir.path(), {true, true}, /*fp16=*/true));
  QNet model;
  model->record_first_output = true;
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.02));
  accelerator.prepare(model, optimizer);
  const bool last = comm->rank() == comm->world_size() - 1;
  SkipOutcome outcome;
  auto generator = at::detail::createCPUGenerator(9 + comm->rank());
  for (int step = 0; step < 4; ++step) {
    const at::Tensor x = at::randn({8, 4}, generator);
    model->first_output = at::Tensor();
    // Before the forward: saving's gathers must not touch a step's graph.
    if (step == 2) outcome.before = accelerate::testing::whole_weights(accelerator, *model);
    auto loss = torch::mse_loss(model->forward(x), torch::sin(x.sum(1, true)));
    if (step == 2 && last) {
      // Through the first unit's output: inf or NaN gradients in every
      // bucket of the unit and below; through the output bias: one element.
      const at::Tensor poison = whole_unit ? model->first_output.sum() : model->output->bias.sum();
      loss = loss + poison * std::numeric_limits<float>::infinity();
    }
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    if (step == 2) outcome.after = accelerate::testing::whole_weights(accelerator, *model);
  }
  outcome.scale = accelerator.scaler()->get_scale();
  return outcome;
}

TEST(ZeroppOverflow, AnInfGradientOnOneRankSkipsTheStepOnEveryRank) {
  for (bool whole_unit : {true, false}) {
    SCOPED_TRACE(whole_unit ? "through the first unit" : "the output bias");
    const auto runs = two_ranks<SkipOutcome>([&](auto comm) { return skip_run(comm, whole_unit); });
    for (int rank = 0; rank < 2; ++rank) {
      SCOPED_TRACE(rank);
      expect_bitwise(runs[rank].after, runs[rank].before);  // the step was skipped
      EXPECT_EQ(runs[rank].scale, 32768.0);                 // backed off once from 65536
    }
  }
}

// A checkpoint run with momentum SGD (optimizer state to resume): loads
// `load_from` first when given, trains steps [first, last), saves after
// step `save_after` to `save_to`. Step s's data is the same in every run.
struct CkptRun {
  Quantized q;
  std::string load_from, save_to;
  int first = 0, last = 0, save_after = -1;
};

struct CkptOutcome {
  std::vector<at::Tensor> at_start, at_end;
};

CkptOutcome ckpt_run(std::shared_ptr<Communicator> comm, const CkptRun& run) {
  accelerate::testing::TempDir dir("accelerate-zeropp-ckpt-" + std::to_string(comm->rank()));
  Accelerator accelerator(comm, zeropp_options(dir.path(), run.q));
  QNet model;
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.02).momentum(0.9));
  accelerator.prepare(model, optimizer);
  if (!run.load_from.empty()) accelerator.load_state(run.load_from);
  CkptOutcome outcome;
  outcome.at_start = accelerate::testing::whole_weights(accelerator, *model);
  sharding_test_models::train_regression_steps(accelerator, model, optimizer, comm->rank(),
                                               run.first, run.last, [&](int step) {
                                                 if (step == run.save_after)
                                                   accelerator.save_state(run.save_to);
                                               });
  outcome.at_end = accelerate::testing::whole_weights(accelerator, *model);
  return outcome;
}

TEST(ZeroppCheckpoint, SavedWithQuantizedCollectivesLoadsWithoutAndViceVersa) {
  accelerate::testing::TempDir dir("accelerate-zeropp-ckpt");
  const std::string from_q = dir.file("quantized"), from_plain = dir.file("plain");
  const Quantized both{true, true};
  auto on_two = [](const CkptRun& run) {
    return two_ranks<CkptOutcome>([&](auto comm) { return ckpt_run(comm, run); });
  };
  // Saved after step 4 of 8 with qwZ+qgZ, and after step 4 of 4 without.
  const auto q_run = on_two({both, "", from_q, 0, 8, 3});
  const auto plain_run = on_two({{}, "", from_plain, 0, 4, 3});
  const auto plain_loads_q = on_two({{}, from_q, "", 4, 4});
  const auto q_loads_plain = on_two({both, from_plain, "", 4, 4});
  const auto q_resumes = on_two({both, from_q, "", 4, 8});
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    // The unquantized run's masters load whole into quantized collectives...
    expect_bitwise(q_loads_plain[rank].at_start, plain_run[rank].at_end);
    // ...and the quantized run's into unquantized ones, as it resumes itself.
    expect_bitwise(plain_loads_q[rank].at_start, q_resumes[rank].at_start);
    // Resuming goes on bitwise as the run that saved.
    expect_bitwise(q_resumes[rank].at_end, q_run[rank].at_end);
    // The runs differ (the quantized one is not the plain one).
    EXPECT_GT(largest_difference(q_resumes[rank].at_start, plain_run[rank].at_end), 0.0);
  }
}
// hpZ with qwZ + qgZ, 2 machines of 2 processes: a unit's gather over the
// job is quantized and its backward gather within the machine carries the
// kept, already dequantized copies, so training is bitwise that of qwZ +
// qgZ without hpZ (a second quantization could move a block's scale).
struct HpzOutcome {
  std::vector<at::Tensor> weights;
  std::int64_t secondary_gathers = 0;
};

std::vector<HpzOutcome> train_hpz(int hpz) {
  accelerate::testing::TempDir dir("accelerate-zeropp-hpz");
  const std::string path = dir.path() + "/ds.json";
  std::ofstream(path) << "{\"train_micro_batch_size_per_gpu\": 8, \"zero_optimization\": "
                         "{\"stage\": 3, \"zero_hpz_partition_size\": "
                      << hpz
                      << ", \"zero_quantized_weights\": true, \"zero_quantized_gradients\": "
                         "true}}\n";
  std::vector<HpzOutcome> outcomes(4);
  accelerate::testing::run_ranks_of_jobs(
      4, [](int rank) { return accelerate::testing::machine_rank_job(rank, 4, 2); },
      [&](int rank, std::shared_ptr<Communicator> comm) {
        Accelerator accelerator(std::move(comm), accelerate::testing::hpz_options(path));
        QNet model;
        accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                           torch::optim::SGDOptions(0.02));
        accelerator.prepare(model, optimizer);
        for (int step = 0; step < 6; ++step) {
          auto generator = at::detail::createCPUGenerator(100 * step + rank);
          const at::Tensor x = at::randn({8, 4}, generator);
          accelerator.backward(torch::mse_loss(model->forward(x), torch::sin(x.sum(1, true))));
          optimizer.step();
          optimizer.zero_grad();
        }
        const auto* shards = accelerate::sharding::unit_shards(*(*model->blocks)[0]);
        ASSERT_NE(shards, nullptr);
        outcomes[rank].secondary_gathers = shards->gather_counts().secondary;
        outcomes[rank].weights = accelerate::testing::whole_weights(accelerator, *model);
      });
  return outcomes;
}

TEST(ZeroppHpz, SecondaryGathersCarryTheDequantizedCopiesBitwise) {
  const auto with_hpz = train_hpz(2);
  const auto without = train_hpz(1);
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE(rank);
    EXPECT_GT(with_hpz[rank].secondary_gathers, 0);
    EXPECT_EQ(without[rank].secondary_gathers, 0);
    expect_bitwise(with_hpz[rank].weights, without[rank].weights);
    expect_bitwise(with_hpz[rank].weights, with_hpz[0].weights);
  }
}

}  // namespace zeropp_sharding_test
