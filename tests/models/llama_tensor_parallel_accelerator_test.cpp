// Tensor parallelism through the Accelerator (ParallelismConfig's tp_size) on
// real ranks (threads over a FileStore, Gloo): the mesh puts tp innermost,
// prepare() splits a Llama by its plan, the ranks of a tensor-parallel group
// read the same batches, and training with clip_grad_norm_ on every step
// follows the same training without tensor parallelism: tp 2 x dp 2 against
// dp 2, tp 2 x ZeRO-3 (DeepSpeed) and tp 2 x FSDP dp_shard 2 against ZeRO-3
// and FSDP on 4. The clipped norms are compared too: counting a norm
// weight once per tensor-parallel rank, or leaving out the other ranks'
// parts, gives other norms. What is not built yet is refused in one line on
// every rank.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "llama_tensor_parallel_training.h"

namespace llama_tensor_parallel_accelerator_test {

using namespace llama_tensor_parallel_training;  // NOLINT: the shared helpers and names

TEST(LlamaTensorParallelAccelerator, TheMeshPutsTensorParallelInnermost) {
  run_rank_communicators(4, [](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm, with(ParallelismConfig().tp_size(2).sp_size(2)));
    EXPECT_EQ(accelerator.tensor_parallel().size(), 2);
    EXPECT_EQ(accelerator.tensor_parallel().rank(), rank % 2);
    EXPECT_EQ(accelerator.tensor_parallel().group()->job_rank(0), rank / 2 * 2);
    EXPECT_EQ(accelerator.sequence_parallel().size(), 2);
    EXPECT_EQ(accelerator.sequence_parallel().group()->job_rank(0), rank % 2);
    EXPECT_FALSE(accelerator.tensor_parallel().sequence_parallel());
    Accelerator megatron(comm, with(ParallelismConfig().tp_size(2).tp_sequence_parallel(true)));
    EXPECT_TRUE(megatron.tensor_parallel().sequence_parallel());
    Accelerator plain(comm, with(ParallelismConfig().tp_sequence_parallel(true)));
    EXPECT_FALSE(plain.tensor_parallel().enabled());
    EXPECT_FALSE(plain.tensor_parallel().sequence_parallel()) << "nothing to split at tp_size 1";
  });
}

TEST(LlamaTensorParallelAccelerator, PrepareSplitsTheModelAndAGroupReadsTheSameBatches) {
  std::vector<at::Tensor> first(4);
  std::vector<int64_t> held(4);
  run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm, with(ParallelismConfig().tp_size(2)));
    auto model = initial_model();
    // Seeds that differ between ranks: a tensor-parallel group must still agree.
    accelerate::DataLoader loader(token_windows(),
                                  accelerate::DataLoaderOptions(2).shuffle(true).seed(rank + 1));
    accelerator.prepare(model, loader);
    EXPECT_EQ(model->tensor_parallel().size(), 2);
    for (const auto& p : model->parameters()) held[rank] += p.numel();
    first[rank] = (*loader.begin()).data.clone();
  });
  int64_t whole = 0;
  for (const auto& p : initial_parameters()) whole += p.numel();
  EXPECT_LT(held[0], whole * 6 / 10) << "each rank holds about half";
  EXPECT_TRUE(first[0].equal(first[1]));
  EXPECT_TRUE(first[2].equal(first[3]));
  EXPECT_FALSE(first[0].equal(first[2]));
}

TEST(LlamaTensorParallelAccelerator, Tp2TimesDp2FollowsDp2WithClippedNorms) {
  const auto reference = curves_of(2, {}, 2);
  ASSERT_GT(reference[0].norms.front(), kMaxNorm) << "the steps clip";
  ASSERT_LT(reference[0].losses.back(), 0.9 * reference[0].losses.front()) << "it trains";
  const auto split = curves_of(4, with(ParallelismConfig().tp_size(2)), 2);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string what = "tp 2 x dp 2, rank " + std::to_string(rank);
    expect_close(split[rank].losses, reference[rank / 2].losses, 1e-5, what + ", loss");
    expect_close(split[rank].norms, reference[rank / 2].norms, 1e-5, what + ", norm");
  }
}

// `split` at tp 2 on 4 processes (2 data-parallel) against `reference`
// without tensor parallelism on 4: the same global batch of 8 windows (4 per
// process against 2), the same mean loss, and the same norm on every rank.
void expect_tp2_follows(const AcceleratorOptions& reference, const AcceleratorOptions& split,
                        const std::string& what) {
  const auto whole = curves_of(4, reference, 2);
  const auto parts = curves_of(4, split, 4);
  expect_close(mean_losses(parts, {0, 2}), mean_losses(whole, {0, 1, 2, 3}), 1e-5,
               what + ", mean loss");
  for (int rank = 0; rank < 4; ++rank) {
    expect_close(parts[rank].norms, whole[0].norms, 1e-5,
                 what + ", norm on rank " + std::to_string(rank));
  }
}

TEST(LlamaTensorParallelAccelerator, Tp2TimesZero3OverFourEqualsZero3OverFour) {
  expect_tp2_follows(zero3(), with(ParallelismConfig().tp_size(2), zero3()), "tp 2 x ZeRO-3");
}

TEST(LlamaTensorParallelAccelerator, Tp2SequenceParallelTimesZero3EqualsZero3OverFour) {
  expect_tp2_follows(zero3(),
                     with(ParallelismConfig().tp_size(2).tp_sequence_parallel(true), zero3()),
                     "tp 2 with sequence parallelism x ZeRO-3");
}

TEST(LlamaTensorParallelAccelerator, Tp2TimesFsdpDpShard2EqualsFsdpOverFour) {
  expect_tp2_follows(with(ParallelismConfig().dp_shard_size(4), fsdp()),
                     with(ParallelismConfig().dp_shard_size(2).tp_size(2), fsdp()), "tp 2 x FSDP");
}

TEST(LlamaTensorParallelAccelerator, DeepSpeedsAutotpSizeSplitsTheModel) {
  accelerate::testing::TempDir dir;
  const std::string file = dir.path() + "/ds.json";
  std::ofstream(file)
      << R"({"zero_optimization": {"stage": 3}, "tensor_parallel": {"autotp_size": 2}})";
  AcceleratorOptions options;
  options.deepspeed_plugin(accelerate::DeepSpeedPlugin().hf_ds_config(file));
  run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm, options);
    EXPECT_EQ(accelerator.tensor_parallel().size(), 2);
    EXPECT_EQ(accelerator.tensor_parallel().rank(), comm->rank() % 2);
    auto model = initial_model();
    accelerator.prepare(model);
    EXPECT_EQ(model->tensor_parallel().size(), 2);
    // The parallelism sizes in use must say the same.
    EXPECT_EQ(error_of([&] { Accelerator(comm, with(ParallelismConfig(), options)); }),
              file +
                  ": tensor_parallel.autotp_size 2 but parallelism_config's tp_size is 1: give "
                  "the same size in both");
  });
  std::ofstream(file)
      << R"({"zero_optimization": {"stage": 2}, "tensor_parallel": {"autotp_size": 3}})";
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    EXPECT_EQ(error_of([&] { Accelerator(comm, options); }),
              file + ": tensor_parallel.autotp_size 3 does not divide the job's 2 processes");
  });
}

struct PlainModelImpl : torch::nn::Module {
  PlainModelImpl() : linear(register_module("linear", torch::nn::Linear(4, 4))) {}
  torch::nn::Linear linear;
};
TORCH_MODULE(PlainModel);

TEST(LlamaTensorParallelAccelerator, WhatCannotRunIsRefusedInOneLineOnEveryRank) {
  run_rank_communicators(4, [](std::shared_ptr<Communicator> comm) {
    EXPECT_EQ(
        error_of([&] { Accelerator(comm, with(ParallelismConfig().tp_size(3))); }),
        "parallelism_config: tp_size 3 does not divide the job's 4 processes "
        "(ParallelismConfig::dp_replicate_size, ParallelismConfig::dp_shard_size, "
        "ParallelismConfig::sp_size, ParallelismConfig::tp_size, ParallelismConfig::cp_size)");
    EXPECT_EQ(
        error_of([&] {
          Accelerator(comm, with(ParallelismConfig().dp_shard_size(4).tp_size(2), fsdp()));
        }),
        "parallelism_config: dp_replicate_size 1 x dp_shard_size 4 x tp_size 2 is 8 processes, "
        "but the job has 4 (ParallelismConfig::dp_replicate_size, "
        "ParallelismConfig::dp_shard_size, ParallelismConfig::sp_size, "
        "ParallelismConfig::tp_size, ParallelismConfig::cp_size)");
    AcceleratorOptions zero3_init;
    zero3_init.deepspeed_plugin(accelerate::DeepSpeedPlugin().zero_stage(3).zero3_init_flag(true));
    EXPECT_EQ(
        error_of([&] { Accelerator(comm, with(ParallelismConfig().tp_size(2), zero3_init)); }),
        "tp_size 2 with zero3_init_flag / fsdp_cpu_ram_efficient_loading (weights from the "
        "main process) is not built yet: leave it off with tensor parallelism");

    Accelerator accelerator(comm, with(ParallelismConfig().tp_size(2)));
    PlainModel plain;
    EXPECT_EQ(error_of([&] { accelerator.prepare(plain); }),
              "tp_size 2: the model (" + plain->name() +
                  ") has no tensor-parallel plan of its own: split it with "
                  "accelerate::parallelize_module(model, plan, accelerator.tensor_parallel()) "
                  "before prepare");
    auto model = initial_model();
    accelerator.prepare(model);
    // A model the program split, under an Accelerator without tensor parallelism.
    Accelerator untouched(comm);
    auto split = initial_model();
    split->parallelize(accelerator.tensor_parallel());
    EXPECT_EQ(error_of([&] { untouched.prepare(split); }),
              "tensor parallelism: the model (" + split->name() +
                  ") is split over tp_size 2 but the Accelerator's tp_size is 1 "
                  "(ParallelismConfig::tp_size, --parallelism_config_tp_size)");
  });
}

}  // namespace llama_tensor_parallel_accelerator_test
