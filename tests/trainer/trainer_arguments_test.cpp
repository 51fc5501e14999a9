// The TrainingArguments added after transformers' later ones, where this
// Trainer alone decides: the one-line errors for fractional step counts,
// save_strategy "best" without a metric and resuming from a save_only_model
// checkpoint; fractions resolved into TrainerState; and the best weights
// loaded from a weights-only checkpoint on 2 ranks. When each one logs,
// evaluates and saves is checked against transformers in
// trainer_flow_features_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/trainer/trainer.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "trainer/tiny_mlp.h"

namespace trainer_arguments_test {

namespace fs = std::filesystem;
using accelerate::IntervalStrategy;
using accelerate::SaveStrategy;
using accelerate::TrainingArguments;

struct ArgsNetImpl : accelerate::testing::TinyMlpImpl {
  ArgsNetImpl() : TinyMlpImpl(3, 1, 11) {}
};
TORCH_MODULE(ArgsNet);

TrainingArguments steps_args(const std::string& dir) {
  return TrainingArguments()
      .output_dir(dir)
      .per_device_train_batch_size(4)
      .per_device_eval_batch_size(4)
      .max_steps(6)
      .learning_rate(0.05)
      .logging_steps(2)
      .seed(3);
}

std::string message(const TrainingArguments& args) {
  try {
    args.validate();
  } catch (const accelerate::ConfigError& error) {
    return error.what();
  }
  return "no error";
}

accelerate::TensorDataset data(int64_t samples, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto x = at::randn({samples, 3}, generator);
  return accelerate::TensorDataset(x, x.sin().sum(1, true));
}

using ArgsTrainer = accelerate::Trainer<ArgsNet, accelerate::TensorDataset>;

// A Trainer of a fresh ArgsNet whose evaluations report `scores` in turn
// as "score" (then 0).
std::unique_ptr<ArgsTrainer> make_trainer(const TrainingArguments& args,
                                          std::shared_ptr<accelerate::Communicator> comm,
                                          std::vector<double> scores = {}) {
  auto trainer = std::make_unique<ArgsTrainer>(
      ArgsNet(), args, data(24, 1),
      [](ArgsNet& m, const accelerate::Example& b) {
        const at::Tensor out = m->forward(b.data);
        return accelerate::ModelOutput(torch::mse_loss(out, b.target), out);
      },
      data(8, 2), accelerate::AcceleratorOptions(), std::move(comm));
  auto evaluations = std::make_shared<std::size_t>(0);
  trainer->compute_metrics([scores, evaluations](const accelerate::EvalPrediction&) {
    const std::size_t i = (*evaluations)++;
    return accelerate::Metrics{{"score", i < scores.size() ? scores[i] : 0.0}};
  });
  return trainer;
}

TEST(TrainerArguments, FractionalStepsResolveAgainstTheRun) {
  // transformers' compute_steps: ceil(max_steps * fraction); whole numbers stay.
  EXPECT_EQ(accelerate::steps_in_run(0.1, 17), 2);
  EXPECT_EQ(accelerate::steps_in_run(0.25, 17), 5);
  EXPECT_EQ(accelerate::steps_in_run(0.5, 10), 5);
  EXPECT_EQ(accelerate::steps_in_run(1, 17), 1);
  EXPECT_EQ(accelerate::steps_in_run(500, 17), 500);
  accelerate::testing::TempDir dir;
  accelerate::TrainerState state;
  accelerate::testing::run_rank_communicators(1, [&](auto comm) {
    auto trainer = make_trainer(steps_args(dir.path())
                                    .logging_steps(0.5)
                                    .eval_strategy(IntervalStrategy::kSteps)
                                    .save_steps(0.34),
                                comm);
    trainer->train();
    state = trainer->state();
  });
  EXPECT_EQ(state.logging_steps, 3);
  EXPECT_EQ(state.eval_steps, 3);  // logging_steps' fraction, as transformers' default
  EXPECT_EQ(state.save_steps, 3);  // ceil(2.04)
  std::ifstream json(dir.path() + "/checkpoint-3/trainer_state.json");
  const std::string text((std::istreambuf_iterator<char>(json)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"logging_steps\": 3,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"save_steps\": 3,"), std::string::npos) << text;
}

TEST(TrainerArguments, StepCountsAboveOneMustBeWhole) {
  const std::string whole =
      " must be a whole number when above 1 (below 1 it is a fraction of "
      "the run's steps), but found ";
  EXPECT_EQ(message(steps_args("x").logging_steps(2.5)),
            "TrainingArguments: logging_steps" + whole + "2.5");
  // Checked only where the strategy uses it, as in transformers.
  EXPECT_EQ(message(steps_args("x").logging_steps(2.5).logging_strategy(IntervalStrategy::kNo)),
            "no error");
  EXPECT_EQ(message(steps_args("x").eval_strategy(IntervalStrategy::kSteps).eval_steps(3.5)),
            "TrainingArguments: eval_steps" + whole + "3.5");
  // eval_steps takes logging_steps' value when unset, and is checked as eval_steps.
  EXPECT_EQ(message(steps_args("x")
                        .logging_strategy(IntervalStrategy::kEpoch)
                        .logging_steps(1.5)
                        .eval_strategy(IntervalStrategy::kSteps)),
            "TrainingArguments: eval_steps" + whole + "1.5");
  EXPECT_EQ(message(steps_args("x").save_steps(7.25)),
            "TrainingArguments: save_steps" + whole + "7.25");
  EXPECT_EQ(message(steps_args("x").save_steps(7.25).save_strategy(IntervalStrategy::kNo)),
            "no error");
  EXPECT_EQ(message(steps_args("x").logging_steps(0.05).save_steps(0.5).eval_steps(1.0)),
            "no error");
}

TEST(TrainerArguments, BestModelStepsAsFractions) {
  const auto best = [](double eval_steps, double save_steps) {
    return steps_args("x")
        .eval_strategy(IntervalStrategy::kSteps)
        .eval_steps(eval_steps)
        .save_steps(save_steps)
        .load_best_model_at_end(true);
  };
  EXPECT_EQ(message(best(0.2, 0.4)), "no error");
  EXPECT_EQ(message(best(2, 4)), "no error");
  EXPECT_EQ(message(best(0.2, 10)),
            "TrainingArguments: load_best_model_at_end cannot check that save_steps is a multiple "
            "of eval_steps when one is a fraction of the run and the other is not: save_steps 10 "
            "and eval_steps 0.2");
  EXPECT_EQ(message(best(0.2, 0.5)),
            "TrainingArguments: load_best_model_at_end requires save_steps to be a multiple of "
            "eval_steps, but found save_steps 0.5 and eval_steps 0.2");
  EXPECT_EQ(message(best(2, 5)),
            "TrainingArguments: load_best_model_at_end requires save_steps to be a round multiple "
            "of eval_steps, but found save_steps 5 and eval_steps 2");
}

TEST(TrainerArguments, SaveStrategyBestNeedsAMetric) {
  EXPECT_EQ(accelerate::parse_save_strategy("best"), SaveStrategy::kBest);
  EXPECT_FALSE(accelerate::parse_save_strategy("Best").has_value());
  EXPECT_STREQ(accelerate::to_string(SaveStrategy::kBest), "best");
  const auto args = steps_args("x").eval_strategy(IntervalStrategy::kSteps);
  EXPECT_EQ(message(TrainingArguments(args).save_strategy(SaveStrategy::kBest)),
            "TrainingArguments: save_strategy best requires metric_for_best_model (or "
            "load_best_model_at_end, whose default is loss)");
  EXPECT_EQ(message(TrainingArguments(args)
                        .save_strategy(SaveStrategy::kBest)
                        .metric_for_best_model("accuracy")),
            "no error");
  // "best" saves exactly the best evaluations, so the strategies need not match.
  EXPECT_EQ(message(TrainingArguments(args)
                        .eval_strategy(IntervalStrategy::kEpoch)
                        .save_strategy(SaveStrategy::kBest)
                        .load_best_model_at_end(true)),
            "no error");
  EXPECT_EQ(message(TrainingArguments(args)
                        .eval_strategy(IntervalStrategy::kEpoch)
                        .load_best_model_at_end(true)),
            "TrainingArguments: load_best_model_at_end requires the save and eval strategy to "
            "match, except when save_strategy is best, but found eval_strategy epoch and "
            "save_strategy steps");
}

TEST(TrainerArguments, WeightsOnlyCheckpointsAreNotResumed) {
  accelerate::testing::TempDir dir;
  const auto args = steps_args(dir.path()).save_steps(3).save_only_model(true);
  std::string error = "no error";
  accelerate::testing::run_rank_communicators(1, [&](auto comm) {
    make_trainer(args, comm)->train();
    try {
      make_trainer(TrainingArguments(args).resume_from_checkpoint("latest"), comm)->train();
    } catch (const accelerate::ConfigError& e) {
      error = e.what();
    }
  });
  const std::string folder = dir.path() + "/checkpoint-6";
  EXPECT_TRUE(fs::exists(folder + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(folder + "/trainer_state.json"));
  EXPECT_FALSE(fs::exists(folder + "/optimizer.bin"));
  EXPECT_FALSE(fs::exists(folder + "/accelerate_checkpoint.json"));
  EXPECT_EQ(error, "resume_from_checkpoint: " + folder +
                       " holds model weights only (saved with save_only_model): no optimizer, "
                       "schedule or random state to resume from; load its weights with "
                       "load_model and start a new run instead");
}

// The best of 3 evaluations is the first (score 3): at the end both ranks'
// models hold checkpoint-2's weights, not the last step's (checkpoint-6).
TEST(TrainerArguments, BestWeightsLoadFromAWeightsOnlyCheckpoint) {
  accelerate::testing::TempDir dir;
  const auto args = steps_args(dir.path())
                        .eval_strategy(IntervalStrategy::kSteps)
                        .save_steps(2)
                        .save_only_model(true)
                        .metric_for_best_model("score")
                        .load_best_model_at_end(true);
  std::vector<std::map<std::string, at::Tensor>> finals(2);
  accelerate::testing::run_rank_communicators(2, [&](auto comm) {
    auto trainer = make_trainer(args, comm, {3, 1, 2});
    trainer->train();
    for (const auto& item : trainer->model()->named_parameters()) {
      finals[comm->rank()][item.key()] = item.value().detach().clone();
    }
  });
  const auto saved = [&](const std::string& folder) {
    std::map<std::string, at::Tensor> weights;
    for (auto& [name, tensor] : accelerate::load_safetensors(folder + "/model.safetensors")) {
      weights[name] = tensor;
    }
    return weights;
  };
  const auto best = saved(dir.path() + "/checkpoint-2");
  const auto last = saved(dir.path() + "/checkpoint-6");
  for (const auto& final : finals) {
    ASSERT_EQ(final.size(), best.size());
    for (const auto& [name, value] : final) {
      EXPECT_TRUE(torch::equal(value, best.at(name))) << name;
      EXPECT_FALSE(torch::equal(value, last.at(name))) << name;
    }
  }
}

}  // namespace trainer_arguments_test
