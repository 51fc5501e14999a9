// The Trainer's optim choices and reduce_lr_on_plateau (on 2 thread ranks):
// the optimizer args.optim names, Adafactor's state through a checkpoint
// and a resumed run, and the plateau schedule stepping on evaluations.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "accelerate/schedule/adafactor.h"
#include "accelerate/schedule/fused_adamw.h"
#include "accelerate/trainer/trainer.h"
#include "checkpoint/optimizer_kinds.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "trainer/tiny_mlp.h"

namespace trainer_optim_test {

using accelerate::Communicator;
using accelerate::TrainingArguments;

struct SmallNetImpl : accelerate::testing::TinyMlpImpl {
  SmallNetImpl() : TinyMlpImpl(4, 1, 23) {}
};
TORCH_MODULE(SmallNet);

using SmallTrainer = accelerate::Trainer<SmallNet, accelerate::TensorDataset>;
using accelerate::testing::identical;
using accelerate::testing::Weights;

accelerate::TensorDataset regression_data(int64_t samples, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto x = at::randn({samples, 4}, generator);
  return accelerate::TensorDataset(x, x.cos().sum(1, true));
}

at::Tensor squared_error(SmallNet& model, const accelerate::Example& batch) {
  return torch::mse_loss(model->forward(batch.data), batch.target);
}

TrainingArguments optim_args_base(const std::string& output_dir) {
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
      .disable_tqdm(true)
      .seed(5);
}

// What a run on 2 thread ranks leaves on rank 0.
struct OptimRun {
  Weights weights;
  std::string kind;    // the checkpoint code's name of the optimizer's type
  bool fused = false;  // a FusedAdamW
  std::vector<double> rates;
  int steps = 0;
};

OptimRun run_trainer(const TrainingArguments& args, bool with_eval = false) {
  OptimRun result;
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    SmallNet model;
    std::optional<accelerate::TensorDataset> eval;
    if (with_eval) eval = regression_data(16, 9);
    SmallTrainer trainer(model, args, regression_data(64, 3), squared_error, eval, {}, comm);
    const auto output = trainer.train();
    if (comm->rank() != 0) return;
    result.weights = accelerate::testing::weights_of(*model);
    const auto* kind = accelerate::checkpoint::kind_of(trainer.optimizer());
    result.kind = kind ? kind->name : "?";
    result.fused = dynamic_cast<const accelerate::FusedAdamW*>(&trainer.optimizer()) != nullptr;
    for (const auto& group : trainer.optimizer().param_groups()) {
      result.rates.push_back(group.options().get_lr());
    }
    result.steps = static_cast<int>(output.global_step);
  });
  return result;
}

TEST(TrainerOptim, OptimNamesChooseTheOptimizer) {
  accelerate::testing::TempDir dir;
  const OptimRun adamw = run_trainer(optim_args_base(dir.path()));
  const OptimRun sgd =
      run_trainer(optim_args_base(dir.path()).optim(accelerate::OptimizerName::kSgd));
  const OptimRun momentum = run_trainer(optim_args_base(dir.path())
                                            .optim(accelerate::OptimizerName::kSgd)
                                            .optim_args("momentum=0.9, nesterov=true"));
  const OptimRun adafactor =
      run_trainer(optim_args_base(dir.path()).optim(accelerate::OptimizerName::kAdafactor));
  const OptimRun unfused =
      run_trainer(optim_args_base(dir.path()).optim(accelerate::OptimizerName::kAdamWTorch));
  EXPECT_EQ(adamw.kind, "AdamW");
  EXPECT_EQ(unfused.kind, "AdamW");
  // adamw_torch_fused is the default, as in transformers on torch >= 2.8.
  EXPECT_TRUE(adamw.fused);
  EXPECT_FALSE(unfused.fused);
  for (std::size_t i = 0; i < adamw.weights.size(); ++i) {
    EXPECT_TRUE(adamw.weights[i].allclose(unfused.weights[i], 1e-5, 1e-6)) << i;
  }
  EXPECT_EQ(sgd.kind, "SGD");
  EXPECT_EQ(momentum.kind, "SGD");
  EXPECT_EQ(adafactor.kind, "Adafactor");
  EXPECT_FALSE(identical(sgd.weights, momentum.weights)) << "optim_args' momentum had no effect";
  EXPECT_FALSE(identical(sgd.weights, adamw.weights));
  EXPECT_FALSE(identical(adafactor.weights, adamw.weights));
  SmallNet untrained;
  EXPECT_FALSE(identical(adafactor.weights, accelerate::testing::weights_of(*untrained)));
}

TEST(TrainerOptim, UnknownOptimAndMisplacedOptimArgsAreOneLineErrors) {
  try {
    accelerate::require_optimizer_name("adam");
    ADD_FAILURE() << "no error";
  } catch (const accelerate::ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              "optim 'adam' is not one of: adamw_torch, adamw_torch_fused, sgd, adafactor");
  }
  EXPECT_EQ(accelerate::require_optimizer_name("adafactor"), accelerate::OptimizerName::kAdafactor);
  EXPECT_THROW(optim_args_base("x").optim_args("momentum=0.9").validate(), accelerate::ConfigError);
  EXPECT_THROW(
      optim_args_base("x").optim(accelerate::OptimizerName::kSgd).optim_args("momentum").validate(),
      accelerate::ConfigError);
  EXPECT_NO_THROW(optim_args_base("x")
                      .optim(accelerate::OptimizerName::kSgd)
                      .optim_args("momentum=0.9")
                      .validate());
}

// Adafactor's factored moments and step counts are in the checkpoint: the
// run resumed from step 3 ends bitwise where the uninterrupted one does.
TEST(TrainerOptim, AdafactorResumesFromACheckpointExactly) {
  accelerate::testing::TempDir whole, resumed;
  const auto args = optim_args_base(whole.path())
                        .optim(accelerate::OptimizerName::kAdafactor)
                        .save_strategy(accelerate::IntervalStrategy::kSteps)
                        .save_steps(3);
  const OptimRun uninterrupted = run_trainer(args);
  std::filesystem::copy(whole.path() + "/checkpoint-3", resumed.path() + "/checkpoint-3",
                        std::filesystem::copy_options::recursive);
  const OptimRun continued = run_trainer(
      TrainingArguments(args).output_dir(resumed.path()).resume_from_checkpoint("latest"));
  EXPECT_TRUE(identical(uninterrupted.weights, continued.weights));
}

// Every evaluation is worse than the best by the (absolute) threshold, so
// with patience 0 each one after the first halves the rates: 8 evaluations
// leave 0.02 / 2^7; warm-up does not apply, as in transformers.
TEST(TrainerOptim, ReduceLrOnPlateauStepsOnEachEvaluation) {
  accelerate::testing::TempDir dir;
  const auto args =
      optim_args_base(dir.path())
          .lr_scheduler_type(accelerate::SchedulerType::kReduceLROnPlateau)
          .lr_scheduler_kwargs(
              accelerate::LrSchedulerKwargs().patience(0).factor(0.5).threshold(1e9).threshold_mode(
                  "abs"))
          .eval_strategy(accelerate::IntervalStrategy::kSteps)
          .eval_steps(1);
  const OptimRun run = run_trainer(args, /*with_eval=*/true);
  ASSERT_EQ(run.steps, 8);
  ASSERT_EQ(run.rates.size(), 2u);
  for (double rate : run.rates) EXPECT_DOUBLE_EQ(rate, 0.02 / 128);
  EXPECT_THROW(optim_args_base("x")
                   .lr_scheduler_type(accelerate::SchedulerType::kReduceLROnPlateau)
                   .validate(),
               accelerate::ConfigError);
}

}  // namespace trainer_optim_test
