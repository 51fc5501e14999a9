// `accelerate estimate-memory`'s bytes per step (src/cli/training_traffic.h)
// against what a real job sends: four thread ranks acting as two machines
// of two, Gloo collectives, one step after a warm-up step, the bytes each
// process's Communicator::traffic() counted (all kinds, all groups) and the
// part to the other machine, averaged over the processes, for every stage,
// bf16 reduce-scatters, hpZ and hybrid sharding. The model's parameter
// counts are multiples of 4, so no bucket is padded and the estimate must
// be exact.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/distributed/communication_traffic.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "cli/training_traffic.h"
#include "sharding/hpz_test_support.h"
#include "sharding/zero_test_model.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace step_traffic_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::testing::ResidualBlock;

constexpr int kWorld = 4, kPerMachine = 2, kBlocks = 3;

// Residual blocks (the stage-3 units, 1072 parameters each) between two
// root layers of 80 and 68 parameters.
struct TrafficNetImpl : torch::nn::Module {
  TrafficNetImpl()
      : input(register_module("input", torch::nn::Linear(4, 16))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        output(register_module("output", torch::nn::Linear(16, 4))) {
    for (int i = 0; i < kBlocks; ++i) blocks->push_back(ResidualBlock(16, 32));
    auto generator = at::detail::createCPUGenerator(17);
    torch::NoGradGuard no_grad;
    for (auto& parameter : parameters()) parameter.normal_(0.0, 0.3, generator);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::tanh(input(x));
    for (std::size_t i = 0; i < blocks->size(); ++i) {
      auto block = std::dynamic_pointer_cast<accelerate::testing::ResidualBlockImpl>(blocks[i]);
      h = accelerate::unit_forward(block, h);
    }
    return output(h);
  }
  torch::nn::Linear input;
  torch::nn::ModuleList blocks;
  torch::nn::Linear output;
};
TORCH_MODULE(TrafficNet);

constexpr double kUnitParameters = kBlocks * 1072.0, kRootParameters = 80 + 68;

struct Case {
  std::string name;
  int stage = 0;
  std::string zero_extra;    // more zero_optimization keys
  std::string top_extra;     // more top-level keys
  bool hybrid = false;       // FSDP HYBRID_SHARD, sharded within a machine
  bool bf16_params = false;  // FSDP FULL_SHARD, param_dtype (so reduce_dtype) bf16
  accelerate::cli::WireFormat wire;
};

AcceleratorOptions options_for(const Case& c, const std::string& dir) {
  AcceleratorOptions options;
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  if (c.hybrid || c.bf16_params) {
    auto plugin = accelerate::FullyShardedDataParallelPlugin()
                      .sharding_strategy(c.hybrid ? accelerate::FsdpShardingStrategy::kHybridShard
                                                  : accelerate::FsdpShardingStrategy::kFullShard)
                      .auto_wrap_policy(accelerate::FsdpAutoWrapPolicy::kTransformerBasedWrap)
                      .transformer_cls_names_to_wrap({"ResidualBlock"});
    if (c.bf16_params) {
      plugin.mixed_precision_policy(
          accelerate::FsdpMixedPrecisionPolicy().param_dtype(accelerate::CollectiveDtype::kBf16));
    }
    options.fsdp_plugin(plugin);
    if (c.hybrid) {
      options.parallelism_config(
          accelerate::ParallelismConfig().dp_replicate_size(2).dp_shard_size(kPerMachine));
    }
    return options;
  }
  if (c.stage == 0) return options;
  const std::string path = dir + "/ds.json";
  std::ofstream(path) << "{\"train_micro_batch_size_per_gpu\": 8, \"zero_optimization\": "
                         "{\"stage\": "
                      << c.stage << c.zero_extra << "}" << c.top_extra << "}\n";
  options.deepspeed_plugin(
      accelerate::DeepSpeedPlugin().hf_ds_config(path).gradient_clipping(std::nullopt));
  return options;
}

struct Counted {
  double sent = 0, sent_off_machine = 0;
};

// The bytes rank `comm` sends in its second step.
Counted second_step(std::shared_ptr<Communicator> comm, const Case& c) {
  accelerate::testing::TempDir dir("accelerate-step-traffic-" + std::to_string(comm->rank()));
  Accelerator accelerator(comm, options_for(c, dir.path()));
  TrafficNet model;
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.01));
  accelerator.prepare(model, optimizer);
  auto generator = at::detail::createCPUGenerator(5 + comm->rank());
  for (int step = 0; step < 2; ++step) {
    if (step == 1) comm->reset_traffic();
    const at::Tensor x = at::randn({8, 4}, generator);
    accelerator.backward(torch::mse_loss(model->forward(x), torch::sin(x)));
    optimizer.step();
    optimizer.zero_grad();
  }
  const accelerate::TrafficCount total = accelerate::total(comm->traffic());
  return {static_cast<double>(total.bytes_sent), static_cast<double>(total.bytes_sent_off_machine)};
}

class StepTraffic : public ::testing::TestWithParam<Case> {};

TEST_P(StepTraffic, EstimateEqualsCountedBytes) {
  const Case& c = GetParam();
  std::vector<Counted> counted(kWorld);
  accelerate::testing::run_ranks_of_jobs(
      kWorld,
      [](int rank) {
        accelerate::JobState job = accelerate::testing::machine_rank_job(rank, kWorld, kPerMachine);
        job.shared_memory_all_reduce = false;  // Gloo: every byte is sent
        return job;
      },
      [&](int rank, std::shared_ptr<Communicator> comm) {
        counted[rank] = second_step(std::move(comm), c);
      });
  Counted mean;
  for (const Counted& r : counted) {
    mean.sent += r.sent / kWorld;
    mean.sent_off_machine += r.sent_off_machine / kWorld;
  }
  accelerate::cli::TrainingSetup setup;
  setup.zero_stage = c.stage;
  setup.num_processes = kWorld;
  setup.num_nodes = kWorld / kPerMachine;
  setup.hybrid = c.hybrid;
  const auto estimate = accelerate::cli::step_traffic(kUnitParameters + kRootParameters,
                                                      kRootParameters, setup, c.wire);
  // Quantized wires carry one fp32 scale per block, and this model's rows
  // are far shorter than a block of 4096, so their scales weigh more than
  // the estimate's 4/4096 bytes per element: within 5% there, exact elsewhere.
  const double tolerance = c.wire.gather_element_bytes < 2 ? 0.05 : 0.0;
  std::cout << c.name << ": counted " << mean.sent << " bytes (" << mean.sent_off_machine
            << " to the other machine), estimated " << estimate.sent << " ("
            << estimate.sent_off_node << ")\n";
  EXPECT_GT(mean.sent, 0);
  if (tolerance == 0) {
    EXPECT_DOUBLE_EQ(mean.sent, estimate.sent);
    EXPECT_DOUBLE_EQ(mean.sent_off_machine, estimate.sent_off_node);
  } else {
    EXPECT_NEAR(mean.sent, estimate.sent, tolerance * estimate.sent);
    EXPECT_NEAR(mean.sent_off_machine, estimate.sent_off_node, tolerance * estimate.sent_off_node);
  }
}

accelerate::cli::WireFormat wire(double gather, double reduce, bool hpz = false,
                                 bool two_level = false) {
  return {"", "", gather, reduce, hpz, two_level};
}

INSTANTIATE_TEST_SUITE_P(
    EveryStage, StepTraffic,
    ::testing::Values(Case{"data_parallel", 0, "", "", false, false, wire(4, 4)},
                      Case{"stage1", 1, "", "", false, false, wire(4, 4)},
                      Case{"stage2", 2, "", "", false, false, wire(4, 4)},
                      Case{"stage3", 3, "", "", false, false, wire(4, 4)},
                      Case{"stage3_bf16_reduce_scatters", 3, "",
                           ", \"communication_data_type\": \"bf16\"", false, false, wire(4, 2)},
                      Case{"stage2_bf16_reduce_scatters", 2, "",
                           ", \"communication_data_type\": \"bf16\"", false, false, wire(4, 2)},
                      Case{"stage3_hpz", 3, ", \"zero_hpz_partition_size\": 2", "", false, false,
                           wire(4, 4, true)},
                      Case{"hybrid_shard", 3, "", "", true, false, wire(4, 4)},
                      Case{"full_shard_bf16_params", 3, "", "", false, true, wire(2, 2)},
                      Case{"stage3_qwz_qgz", 3,
                           ", \"zero_quantized_weights\": true, \"zero_quantized_gradients\": true",
                           "", false, false, wire(1 + 4.0 / 4096, 0.5 + 4.0 / 4096, false, true)}),
    [](const auto& info) { return info.param.name; });

}  // namespace step_traffic_test
