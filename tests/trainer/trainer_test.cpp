// accelerate::Trainer: on 2 ranks (threads with real collectives) it trains
// exactly as the hand-written Accelerator loop it stands for (accumulation,
// clipping, AdamW's groups, warm-up schedule), logs at logging_steps,
// evaluates each sample once, saves checkpoint-N folders with rotation, and
// resumes from one to the same parameters bitwise.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <gmock/gmock.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "accelerate/schedule/fused_adamw.h"
#include "accelerate/trainer/trainer.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "trainer/tiny_mlp.h"

namespace trainer_test {

using accelerate::Communicator;
using accelerate::TrainingArguments;

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(4, 16))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})))),
        fc2(register_module("fc2", torch::nn::Linear(16, 1))) {
    // In place, as LibTorch's initialisers do (so it also builds inside
    // Accelerator::zero3_init()).
    auto generator = at::detail::createCPUGenerator(17);
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) p.normal_(0.0, 0.5, generator);
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(norm(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::LayerNorm norm;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

accelerate::TensorDataset data(int64_t samples, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto x = at::randn({samples, 4}, generator);
  return accelerate::TensorDataset(x, x.sin().sum(1, true));
}

at::Tensor mse(Net& model, const accelerate::Example& batch) {
  return torch::mse_loss(model->forward(batch.data), batch.target);
}

using accelerate::testing::TempDir;

TrainingArguments base_args(const std::string& output_dir) {
  return TrainingArguments()
      .output_dir(output_dir)
      .per_device_train_batch_size(4)
      .gradient_accumulation_steps(2)
      .learning_rate(0.02)
      .weight_decay(0.1)
      .warmup_steps(2)
      .max_steps(8)
      .logging_steps(2)
      .save_strategy(accelerate::IntervalStrategy::kNo)
      .seed(5);
}

using Params = accelerate::testing::Weights;
using accelerate::testing::identical;

Params rank0_params(Net& model) { return accelerate::testing::weights_of(*model); }

// Runs `body(comm)` on 2 thread ranks and returns rank 0's result.
template <class Body>
auto on_two_ranks(Body body) {
  decltype(body(std::shared_ptr<Communicator>())) result{};
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    auto mine = body(comm);
    if (comm->rank() == 0) result = mine;
  });
  return result;
}

// Counts the optimizer steps a run takes.
struct StepCounter : accelerate::TrainerCallback {
  int steps = 0;
  int64_t first_step = -1;
  void on_step_end(const accelerate::TrainerState& state) override {
    if (first_step < 0) first_step = state.global_step;
    ++steps;
  }
};

Params train_with_trainer(const TrainingArguments& args, std::shared_ptr<Communicator> comm,
                          StepCounter* counter = nullptr) {
  Net model;
  accelerate::Trainer<Net, accelerate::TensorDataset> trainer(model, args, data(64, 3), mse,
                                                              std::nullopt, {}, std::move(comm));
  auto steps = std::make_shared<StepCounter>();
  trainer.add_callback(steps);
  trainer.train();
  if (counter != nullptr && trainer.accelerator().is_main_process()) *counter = *steps;
  return rank0_params(model);
}

TEST(Trainer, TrainsAsTheHandWrittenLoopItStandsFor) {
  TempDir dir;
  const TrainingArguments args = base_args(dir.path());
  const Params by_trainer = on_two_ranks([&](auto comm) { return train_with_trainer(args, comm); });
  const Params by_hand = on_two_ranks([&](std::shared_ptr<Communicator> comm) {
    accelerate::Accelerator accelerator(
        comm, accelerate::AcceleratorOptions().gradient_accumulation_steps(2));
    Net model;
    accelerate::set_seed(5);
    accelerate::DataLoader loader(data(64, 3),
                                  accelerate::DataLoaderOptions(4).shuffle(true).seed(5));
    std::vector<at::Tensor> decay{model->fc1->weight, model->fc2->weight};
    std::vector<at::Tensor> no_decay{model->fc1->bias, model->norm->weight, model->norm->bias,
                                     model->fc2->bias};
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(0.02).weight_decay(0.1)));
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                      torch::optim::AdamWOptions(0.02).weight_decay(0.0)));
    // The default optim, adamw_torch_fused.
    accelerate::Optimizer<accelerate::FusedAdamW> optimizer(groups);
    accelerator.prepare(model, optimizer, loader);
    accelerate::Scheduler<accelerate::WarmupSchedule> scheduler(
        optimizer, accelerate::SchedulerType::kLinear, 2, 8);
    accelerator.prepare(scheduler);
    int steps = 0;
    while (steps < 8) {
      for (auto& batch : loader) {
        auto scope = accelerator.accumulate();
        accelerator.backward(mse(model, batch));
        if (!accelerator.sync_gradients()) continue;
        accelerator.clip_grad_norm_(model->parameters(), 1.0);
        optimizer.step();
        scheduler.step();
        optimizer.zero_grad();
        if (++steps == 8) break;
      }
    }
    return rank0_params(model);
  });
  EXPECT_TRUE(identical(by_trainer, by_hand));
  Net untrained;
  EXPECT_FALSE(identical(by_trainer, rank0_params(untrained)));
}

TEST(Trainer, AdamWDoesNotDecayBiasesAndLayerNorm) {
  Net model;
  const auto groups = accelerate::TrainerLoop::adamw_groups(*model, base_args("unused"));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params().size(), 2u);  // fc1.weight, fc2.weight
  EXPECT_EQ(groups[1].params().size(), 4u);  // the biases and norm's weight and bias
  EXPECT_TRUE(groups[0].params()[0].is_same(model->fc1->weight));
}

struct Recorder : accelerate::TrainerCallback {
  std::vector<accelerate::Metrics> logs, evaluations;
  std::vector<std::string> saves;
  int steps = 0;
  void on_step_end(const accelerate::TrainerState&) override { ++steps; }
  void on_log(const accelerate::TrainerState&, const accelerate::Metrics& l) override {
    logs.push_back(l);
  }
  void on_evaluate(const accelerate::TrainerState&, const accelerate::Metrics& m) override {
    evaluations.push_back(m);
  }
  void on_save(const accelerate::TrainerState&, const std::string& folder) override {
    saves.push_back(folder);
  }
};

// A run on data(64, 3) evaluated on data(24, 9): what it recorded, and rank
// 0's parameters after it.
struct RecordedRun {
  std::shared_ptr<Recorder> recorder;
  Params params;
};
RecordedRun train_recorded(const TrainingArguments& args, std::shared_ptr<Communicator> comm) {
  Net model;
  accelerate::Trainer<Net, accelerate::TensorDataset> trainer(model, args, data(64, 3), mse,
                                                              data(24, 9), {}, std::move(comm));
  RecordedRun run{std::make_shared<Recorder>(), {}};
  trainer.add_callback(run.recorder);
  trainer.train();
  run.params = rank0_params(model);
  return run;
}

// report_to starts its trackers under output_dir/runs: the JSONL file holds
// every training log in full, and the run's metrics at the end, as
// log_history does (without report_to nothing is started: the tests above).
TEST(Trainer, ReportToWritesTheLogsUnderOutputDirRuns) {
  TempDir dir;
  const auto args = base_args(dir.path()).report_to({"jsonl"});
  const auto recorder = on_two_ranks([&](std::shared_ptr<Communicator> comm) {
    return train_recorded(args, std::move(comm)).recorder;
  });
  std::ifstream in(dir.path() + "/runs/metrics.jsonl");
  ASSERT_TRUE(in) << "no " << dir.path() << "/runs/metrics.jsonl";
  std::vector<std::string> loss_lines;
  int end_lines = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"loss\":") != std::string::npos) loss_lines.push_back(line);
    if (line.find("\"train_runtime\":") != std::string::npos) ++end_lines;
  }
  ASSERT_EQ(loss_lines.size(), 4u);  // steps 2, 4, 6, 8
  EXPECT_EQ(end_lines, 1);
  std::vector<double> logged;
  for (const auto& log : recorder->logs)
    if (log.count("loss")) logged.push_back(log.at("loss"));
  ASSERT_EQ(logged.size(), 4u);
  for (std::size_t i = 0; i < logged.size(); ++i) {
    const auto at = loss_lines[i].find("\"loss\":") + 7;
    EXPECT_EQ(std::stod(loss_lines[i].substr(at)), logged[i]) << loss_lines[i];  // every digit
  }
}

TEST(Trainer, LogsEvaluatesAndSavesAtTheirIntervals) {
  TempDir dir;
  const auto args = base_args(dir.path())
                        .eval_strategy(accelerate::IntervalStrategy::kSteps)
                        .eval_steps(4)
                        .save_strategy(accelerate::IntervalStrategy::kSteps)
                        .save_steps(3)
                        .save_total_limit(1);
  const auto recorder = on_two_ranks([&](std::shared_ptr<Communicator> comm) {
    return train_recorded(args, std::move(comm)).recorder;
  });
  EXPECT_EQ(recorder->steps, 8);
  // Steps 2, 4, 6, 8, then the run's metrics, as transformers logs them.
  ASSERT_EQ(recorder->logs.size(), 5u);
  EXPECT_TRUE(recorder->logs[4].count("train_loss") && recorder->logs[4].count("train_runtime"));
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(recorder->logs[i].at("step"), 2.0 * (i + 1));
    EXPECT_TRUE(std::isfinite(recorder->logs[i].at("loss")));
    EXPECT_TRUE(recorder->logs[i].count("grad_norm"));
  }
  // The rate each logged step ran with (transformers 5): step 2 ran with
  // warm-up step 1 of 2, step 4 with 5/6 of the rate (3 of the 6 decay steps).
  EXPECT_DOUBLE_EQ(recorder->logs[0].at("learning_rate"), 0.02 * 1.0 / 2.0);
  EXPECT_DOUBLE_EQ(recorder->logs[1].at("learning_rate"), 0.02 * 5.0 / 6.0);
  ASSERT_EQ(recorder->evaluations.size(), 2u);  // steps 4 and 8
  // Steps 3 and 6, and the last step, 8, as transformers saves it.
  EXPECT_EQ(recorder->saves,
            (std::vector<std::string>{dir.path() + "/checkpoint-3", dir.path() + "/checkpoint-6",
                                      dir.path() + "/checkpoint-8"}));
  // save_total_limit 1: only the newest folder is left, with its state.
  const auto left = std::vector<std::string>{dir.path() + "/checkpoint-8"};
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().filename().string().rfind("checkpoint-", 0) == 0) {
      found.push_back(entry.path().string());
    }
  }
  EXPECT_EQ(found, left);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/checkpoint-8/trainer_state.json"));
}

TEST(Trainer, EvaluationLossIsTheMeanOverEverySampleOnce) {
  TempDir dir;
  const auto eval = data(24, 9);
  const double eval_loss = on_two_ranks([&](std::shared_ptr<Communicator> comm) {
    Net model;
    accelerate::Trainer<Net, accelerate::TensorDataset> trainer(
        model, base_args(dir.path()).per_device_eval_batch_size(4), data(64, 3), mse, eval, {},
        comm);
    return trainer.evaluate().at("eval_loss");
  });
  Net model;
  const double expected =
      torch::mse_loss(model->forward(eval.data()), eval.targets()).item<double>();
  EXPECT_NEAR(eval_loss, expected, 1e-6);
}

TEST(Trainer, ResumingFromACheckpointEndsWhereTheUninterruptedRunEnds) {
  TempDir whole, resumed;
  const auto args =
      base_args(whole.path()).save_strategy(accelerate::IntervalStrategy::kSteps).save_steps(3);
  const Params uninterrupted =
      on_two_ranks([&](auto comm) { return train_with_trainer(args, comm); });
  std::filesystem::copy(whole.path() + "/checkpoint-3", resumed.path() + "/checkpoint-3",
                        std::filesystem::copy_options::recursive);
  StepCounter counter;
  const Params continued = on_two_ranks([&](auto comm) {
    return train_with_trainer(
        TrainingArguments(args).output_dir(resumed.path()).resume_from_checkpoint("latest"), comm,
        &counter);
  });
  EXPECT_TRUE(identical(uninterrupted, continued));
  // It resumed: steps 4 to 8 only.
  EXPECT_EQ(counter.steps, 5);
  EXPECT_EQ(counter.first_step, 4);
  // "latest" with nothing saved starts afresh.
  TempDir empty;
  const Params fresh = on_two_ranks([&](auto comm) {
    return train_with_trainer(
        TrainingArguments(args).output_dir(empty.path()).resume_from_checkpoint("latest"), comm);
  });
  EXPECT_TRUE(identical(uninterrupted, fresh));
}

Params train_with_options(const TrainingArguments& args, accelerate::AcceleratorOptions options,
                          std::shared_ptr<Communicator> comm) {
  Net model;
  accelerate::Trainer<Net, accelerate::TensorDataset> trainer(model, args, data(64, 3), mse,
                                                              std::nullopt, options, comm);
  trainer.train();
  return rank0_params(model);
}

TEST(Trainer, UnderZeroStage2TrainsAsDataParallelism) {
  // The DeepSpeed plugin clips at 1.0 (its "auto"), where the Trainer's
  // max_grad_norm 1.0 clips under data parallelism: the same updates, with
  // the global norm summed over shards instead of whole gradients.
  TempDir dir;
  const TrainingArguments args = base_args(dir.path());
  const Params sharded = on_two_ranks([&](auto comm) {
    return train_with_options(args,
                              accelerate::AcceleratorOptions().deepspeed_plugin(
                                  accelerate::DeepSpeedPlugin().zero_stage(2)),
                              comm);
  });
  const Params data_parallel =
      on_two_ranks([&](auto comm) { return train_with_options(args, {}, comm); });
  ASSERT_EQ(sharded.size(), data_parallel.size());
  for (std::size_t i = 0; i < sharded.size(); ++i) {
    EXPECT_TRUE(torch::allclose(sharded[i], data_parallel[i], 1e-5, 1e-6)) << "parameter " << i;
  }
}

// Hugging Face's model_init: the Trainer builds the model (inside
// zero3_init) and trains as with a model built beforehand; under FSDP
// FULL_SHARD with cpu_ram_efficient_loading, process 1 builds it empty and
// receives process 0's weights, and training matches data parallelism (the
// clipping norm is summed over shards there, hence the bound).
TEST(Trainer, ModelInitTrainsAsAModelBuiltBeforehandAlsoBuiltEmptyUnderFullShard) {
  TempDir dir;
  const TrainingArguments args = base_args(dir.path());
  std::vector<int> built_empty(2, -1);  // per rank: model_init ran inside an active guard
  const auto with_init = [&](accelerate::AcceleratorOptions options,
                             std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    const auto model_init = [&built_empty, rank] {
      built_empty[rank] = c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Meta);
      return Net();
    };
    accelerate::Trainer<Net, accelerate::TensorDataset> trainer(model_init, args, data(64, 3), mse,
                                                                std::nullopt, options, comm);
    trainer.train();
    return rank0_params(trainer.model());
  };
  const Params built = on_two_ranks([&](auto comm) { return train_with_trainer(args, comm); });
  const Params initialised = on_two_ranks([&](auto comm) { return with_init({}, comm); });
  EXPECT_TRUE(identical(initialised, built));
  EXPECT_EQ(built_empty, std::vector<int>({0, 0}));
  const Params empty = on_two_ranks([&](auto comm) {
    // FULL_SHARD without units (NO_WRAP): Net calls its layers directly.
    return with_init(
        accelerate::AcceleratorOptions().fsdp_plugin(
            accelerate::FullyShardedDataParallelPlugin().cpu_ram_efficient_loading(true)),
        comm);
  });
  EXPECT_EQ(built_empty, std::vector<int>({0, 1})) << "process 1 should build it empty";
  ASSERT_EQ(empty.size(), built.size());
  for (std::size_t i = 0; i < empty.size(); ++i) {
    EXPECT_TRUE(torch::allclose(empty[i], built[i], 1e-5, 1e-6)) << "parameter " << i;
  }
}

TEST(Trainer, Bf16TrainsAndDiffersFromFp32) {
  TempDir dir;
  const Params fp32 =
      on_two_ranks([&](auto comm) { return train_with_trainer(base_args(dir.path()), comm); });
  const Params bf16 = on_two_ranks(
      [&](auto comm) { return train_with_trainer(base_args(dir.path()).bf16(true), comm); });
  Net untrained;
  EXPECT_FALSE(identical(bf16, fp32));
  EXPECT_FALSE(identical(bf16, rank0_params(untrained)));
  for (std::size_t i = 0; i < fp32.size(); ++i) {
    EXPECT_TRUE(torch::allclose(bf16[i], fp32[i], 0.05, 0.05)) << "parameter " << i;
  }
}

// An evaluation every 2 steps leaves training bitwise as it is without one,
// in fp32 and bf16 (where autocast's region spans the whole loop: a cache
// of weights cast under the evaluation's no-grad used to cost the next step
// its gradients).
TEST(Trainer, EvaluatingBetweenStepsTrainsBitwiseAsWithout) {
  TempDir dir;
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    auto train = [&](bool evaluate) {
      auto args = base_args(dir.path()).bf16(bf16);
      if (evaluate) args.eval_strategy(accelerate::IntervalStrategy::kSteps).eval_steps(2);
      return on_two_ranks([&](std::shared_ptr<Communicator> comm) {
        const RecordedRun run = train_recorded(args, std::move(comm));
        EXPECT_EQ(run.recorder->evaluations.size(), evaluate ? 4u : 0u);
        return run.params;
      });
    };
    const Params with_eval = train(true), without = train(false);
    Net untrained;
    EXPECT_FALSE(identical(without, rank0_params(untrained)));
    EXPECT_TRUE(identical(with_eval, without));
  }
}

TEST(Trainer, BadArgumentsAreOneLineConfigErrors) {
  EXPECT_THROW(base_args("x").per_device_train_batch_size(0).validate(), accelerate::ConfigError);
  EXPECT_THROW(base_args("x").bf16(true).fp16(true).validate(), accelerate::ConfigError);
  EXPECT_THROW(base_args("x").max_steps(-1).num_train_epochs(0).validate(),
               accelerate::ConfigError);
  try {
    base_args("x").warmup_ratio(2).validate();
    ADD_FAILURE() << "no error";
  } catch (const accelerate::ConfigError& error) {
    EXPECT_EQ(std::string(error.what()), "TrainingArguments: warmup_ratio must be in [0, 1]");
  }
  // logging_steps 0 is refused only where it is used, as in Hugging Face.
  const auto message = [](const TrainingArguments& args) {
    try {
      args.validate();
    } catch (const accelerate::ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(base_args("x").logging_steps(0)),
            "TrainingArguments: logging_strategy steps requires a positive logging_steps");
  EXPECT_EQ(message(base_args("x")
                        .logging_steps(0)
                        .logging_strategy(accelerate::IntervalStrategy::kEpoch)
                        .eval_strategy(accelerate::IntervalStrategy::kSteps)),
            "TrainingArguments: eval_strategy steps requires a positive eval_steps or "
            "logging_steps");
  EXPECT_EQ(
      message(base_args("x").logging_steps(0).logging_strategy(accelerate::IntervalStrategy::kNo)),
      "no error");
  EXPECT_EQ(accelerate::parse_interval_strategy("epoch"), accelerate::IntervalStrategy::kEpoch);
  EXPECT_FALSE(accelerate::parse_interval_strategy("sometimes").has_value());
}

}  // namespace trainer_test
