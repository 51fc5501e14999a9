// Callbacks that steer the Trainer (TrainerControl), EarlyStoppingCallback,
// and best-model selection: real training of a tiny regression model, with
// evaluation metrics scripted so that the right answer is known in advance.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "accelerate/trainer/trainer.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "trainer/tiny_mlp.h"

namespace trainer_control_test {

using accelerate::Communicator;
using accelerate::IntervalStrategy;
using accelerate::TrainerControl;
using accelerate::TrainerState;
using accelerate::TrainingArguments;

struct TinyImpl : accelerate::testing::TinyMlpImpl {
  TinyImpl() : TinyMlpImpl(3, 1, 31) {}
};
TORCH_MODULE(Tiny);
using TinyTrainer = accelerate::Trainer<Tiny, accelerate::TensorDataset>;

accelerate::TensorDataset regression(int64_t samples, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto x = at::randn({samples, 3}, generator);
  return accelerate::TensorDataset(x, x.cos().sum(1, true));
}

at::Tensor squared_error(Tiny& model, const accelerate::Example& batch) {
  return torch::mse_loss(model->forward(batch.data), batch.target);
}

// Evaluation i (from 0) reports "score" scores[i]: a known metric sequence.
accelerate::ComputeMetrics scripted(std::vector<double> scores) {
  auto calls = std::make_shared<std::size_t>(0);
  return [scores, calls](const accelerate::EvalPrediction&) {
    const double score = scores.at(std::min(*calls, scores.size() - 1));
    ++*calls;
    return accelerate::Metrics{{"score", score}};
  };
}

accelerate::ModelOutput with_predictions(Tiny& model, const accelerate::Example& batch) {
  at::Tensor out = model->forward(batch.data);
  return {torch::mse_loss(out, batch.target), out};
}

TrainingArguments every_step(const std::string& dir) {
  return TrainingArguments()
      .output_dir(dir)
      .per_device_train_batch_size(4)
      .learning_rate(0.05)
      .max_steps(20)
      .logging_steps(1)
      .eval_strategy(IntervalStrategy::kSteps)
      .eval_steps(1)
      .save_strategy(IntervalStrategy::kNo)
      .metric_for_best_model("score")
      .seed(2);
}

struct Events : accelerate::TrainerCallback {
  int init_end = 0, epoch_begin = 0, epoch_end = 0, step_begin = 0, evaluations = 0, train_end = 0;
  std::vector<std::string> saves;
  void on_init_end(const TrainingArguments&, const TrainerState&, TrainerControl&) override {
    ++init_end;
  }
  void on_epoch_begin(const TrainingArguments&, const TrainerState&, TrainerControl&) override {
    ++epoch_begin;
  }
  void on_epoch_end(const TrainingArguments&, const TrainerState&, TrainerControl&) override {
    ++epoch_end;
  }
  void on_step_begin(const TrainingArguments&, const TrainerState&, TrainerControl&) override {
    ++step_begin;
  }
  void on_evaluate(const TrainerState&, const accelerate::Metrics&) override { ++evaluations; }
  void on_save(const TrainerState&, const std::string& folder) override { saves.push_back(folder); }
  void on_train_end(const TrainerState&) override { ++train_end; }
};

// Runs `body(trainer)` after building a Trainer on one rank.
template <class Body>
void on_one_rank(const TrainingArguments& args, accelerate::ComputeMetrics metrics, Body body,
                 std::optional<accelerate::TensorDataset> eval = regression(12, 5)) {
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    Tiny model;
    TinyTrainer trainer(model, args, regression(32, 1), with_predictions, eval, {}, comm);
    if (metrics) trainer.compute_metrics(metrics);
    body(trainer);
  });
}

TEST(TrainerControl, ACallbackStopsTrainingEvaluatesAndSavesOnDemand) {
  accelerate::testing::TempDir dir;
  struct Steer : accelerate::TrainerCallback {
    void on_step_end(const TrainingArguments&, const TrainerState& state,
                     TrainerControl& control) override {
      if (state.global_step == 2) control.should_evaluate = true;
      if (state.global_step == 4) control.should_log = true;
      if (state.global_step == 3) control.should_save = true;
      if (state.global_step == 5) control.should_training_stop = true;
    }
  };
  const auto args = TrainingArguments()
                        .output_dir(dir.path())
                        .per_device_train_batch_size(4)
                        .max_steps(20)
                        .logging_steps(100)
                        .save_strategy(IntervalStrategy::kNo);
  on_one_rank(args, nullptr, [&](TinyTrainer& trainer) {
    auto events = std::make_shared<Events>();
    trainer.add_callback(events);
    trainer.add_callback(std::make_shared<Steer>());
    const auto output = trainer.train();
    EXPECT_EQ(output.global_step, 5);
    EXPECT_EQ(events->step_begin, 5);
    EXPECT_EQ(events->evaluations, 1);
    EXPECT_EQ(events->saves, std::vector<std::string>{dir.path() + "/checkpoint-3"});
    EXPECT_EQ(events->init_end, 1);
    EXPECT_EQ(events->epoch_begin, 1);  // 8 batches an epoch: stopped in the first
    EXPECT_EQ(events->train_end, 1);
    // logging_steps 100: the one training log is the one asked for at step 4.
    std::vector<double> logged_at;
    for (const auto& entry : trainer.state().log_history) {
      if (entry.count("loss")) logged_at.push_back(entry.at("step"));
    }
    EXPECT_EQ(logged_at, std::vector<double>{4.0});
  });
}

TEST(TrainerControl, ShouldEpochStopEndsTheEpochAndItsEvaluationRuns) {
  accelerate::testing::TempDir dir;
  struct StopEpochs : accelerate::TrainerCallback {
    std::vector<int64_t> epoch_end_steps;
    void on_step_end(const TrainingArguments&, const TrainerState& state,
                     TrainerControl& control) override {
      if (state.global_step % 2 == 0) control.should_epoch_stop = true;  // 2 steps an epoch
    }
    void on_epoch_end(const TrainingArguments&, const TrainerState& state,
                      TrainerControl&) override {
      epoch_end_steps.push_back(state.global_step);
    }
  };
  const auto args = every_step(dir.path()).eval_strategy(IntervalStrategy::kEpoch).max_steps(6);
  on_one_rank(args, scripted({1.0}), [&](TinyTrainer& trainer) {
    auto stop = std::make_shared<StopEpochs>();
    auto events = std::make_shared<Events>();
    trainer.add_callback(stop);
    trainer.add_callback(events);
    trainer.train();
    EXPECT_EQ(stop->epoch_end_steps, (std::vector<int64_t>{2, 4, 6}));
    EXPECT_EQ(events->evaluations, 3);
  });
}

// Runs every_step() training with these scores and an EarlyStoppingCallback.
int64_t steps_until_stopped(std::vector<double> scores, bool greater_is_better, int patience,
                            double threshold) {
  accelerate::testing::TempDir dir;
  int64_t steps = -1;
  on_one_rank(every_step(dir.path()).greater_is_better(greater_is_better),
              scripted(std::move(scores)), [&](TinyTrainer& trainer) {
                trainer.add_callback(
                    std::make_shared<accelerate::EarlyStoppingCallback>(patience, threshold));
                steps = trainer.train().global_step;
              });
  return steps;
}

TEST(EarlyStopping, StopsAtTheEvaluationThatExhaustsThePatience) {
  // Best 0.6 at evaluation 2; 0.6 and 0.55 do not improve on it: patience 2
  // runs out at evaluation 4 (one evaluation a step).
  EXPECT_EQ(steps_until_stopped({0.5, 0.6, 0.6, 0.55, 0.9}, true, 2, 0.0), 4);
  // An improvement resets the count: 0.5, 0.4 (1), 0.7 (0), 0.7 (1), 0.6 (2).
  EXPECT_EQ(steps_until_stopped({0.5, 0.4, 0.7, 0.7, 0.6, 0.9}, true, 2, 0.0), 5);
  // Lower is better: 3, 2, 2.5 (1) with patience 1.
  EXPECT_EQ(steps_until_stopped({3.0, 2.0, 2.5, 1.0}, false, 1, 0.0), 3);
  // Gains of 0.05 are not above the threshold 0.1: the second evaluation stops.
  EXPECT_EQ(steps_until_stopped({0.5, 0.55, 0.6}, true, 1, 0.1), 2);
  // Never stopping: the run's 20 steps.
  std::vector<double> rising;
  for (int i = 0; i < 25; ++i) rising.push_back(i);
  EXPECT_EQ(steps_until_stopped(rising, true, 1, 0.0), 20);
}

TEST(EarlyStopping, NeedsAMetricAndEvaluations) {
  accelerate::testing::TempDir dir;
  on_one_rank(every_step(dir.path()).metric_for_best_model(std::nullopt), nullptr,
              [&](TinyTrainer& trainer) {
                trainer.add_callback(std::make_shared<accelerate::EarlyStoppingCallback>());
                EXPECT_THROW(trainer.train(), accelerate::ConfigError);
              });
  on_one_rank(every_step(dir.path()).eval_strategy(IntervalStrategy::kNo), nullptr,
              [&](TinyTrainer& trainer) {
                trainer.add_callback(std::make_shared<accelerate::EarlyStoppingCallback>());
                EXPECT_THROW(trainer.train(), accelerate::ConfigError);
              });
  EXPECT_THROW(accelerate::EarlyStoppingCallback(0), accelerate::ConfigError);
}

TEST(BestModel, ArgumentsHaveHuggingFacesDefaultsAndRules) {
  TrainingArguments args;
  EXPECT_FALSE(args.best_metric_key().has_value());
  args.load_best_model_at_end(true).eval_strategy(IntervalStrategy::kSteps);
  EXPECT_EQ(args.best_metric_key(), std::optional<std::string>("eval_loss"));
  EXPECT_FALSE(args.best_metric_greater_is_better());
  args.metric_for_best_model("accuracy");
  EXPECT_EQ(args.best_metric_key(), std::optional<std::string>("eval_accuracy"));
  EXPECT_TRUE(args.best_metric_greater_is_better());
  args.greater_is_better(false);
  EXPECT_FALSE(args.best_metric_greater_is_better());
  EXPECT_NO_THROW(args.eval_steps(100).save_steps(500).validate());
  try {
    TrainingArguments(args).save_strategy(IntervalStrategy::kEpoch).validate();
    ADD_FAILURE() << "no error";
  } catch (const accelerate::ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              "TrainingArguments: load_best_model_at_end requires the save and eval strategy to "
              "match, except when save_strategy is best, but found eval_strategy steps and "
              "save_strategy epoch");
  }
  EXPECT_THROW(TrainingArguments(args).save_steps(250).validate(), accelerate::ConfigError);
}

using Weights = std::vector<std::pair<std::string, at::Tensor>>;

bool same_weights(const Weights& a, const Weights& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || !torch::equal(a[i].second, b[i].second)) return false;
  }
  return true;
}

std::vector<std::string> checkpoints_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("checkpoint-", 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return std::stoi(a.substr(11)) < std::stoi(b.substr(11));
  });
  return names;
}

// At each save: the model's whole weights and the checkpoint folders left.
struct SaveRecorder : accelerate::TrainerCallback {
  explicit SaveRecorder(TinyTrainer* trainer) : trainer(trainer) {}
  void on_save(const TrainerState& state, const std::string& folder) override {
    weights[state.global_step] = trainer->accelerator().get_state_dict(trainer->model());
    left[state.global_step] = checkpoints_in(std::filesystem::path(folder).parent_path());
  }
  TinyTrainer* trainer;
  std::map<int64_t, Weights> weights;
  std::map<int64_t, std::vector<std::string>> left;
};

struct BestRun {
  std::shared_ptr<SaveRecorder> saves;
  Weights final_weights;
  TrainerState state;
  std::vector<std::string> left;
  std::vector<std::string> files;  // in the best checkpoint
};

class BestModelUnder : public ::testing::TestWithParam<bool> {};

TEST_P(BestModelUnder, TheBestCheckpointIsLoadedAtTheEndAndSurvivesRotation) {
  accelerate::testing::TempDir dir;
  // Evaluations (and saves) at steps 2, 4, ..., 10; step 4's score is best.
  const auto args = every_step(dir.path())
                        .max_steps(10)
                        .eval_steps(2)
                        .save_strategy(IntervalStrategy::kSteps)
                        .save_steps(2)
                        .save_total_limit(1)
                        .load_best_model_at_end(true);
  accelerate::AcceleratorOptions options;
  // FULL_SHARD with SHARDED_STATE_DICT: each process saves and loads its shard.
  if (GetParam()) {
    options.fsdp_plugin(accelerate::FullyShardedDataParallelPlugin().state_dict_type(
        accelerate::FsdpStateDictType::kShardedStateDict));
  }
  BestRun run;
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    Tiny model;
    TinyTrainer trainer(model, args, regression(32, 1), with_predictions, regression(12, 5),
                        options, comm);
    trainer.compute_metrics(scripted({0.1, 0.9, 0.3, 0.2, 0.4}));
    auto saves = std::make_shared<SaveRecorder>(&trainer);
    trainer.add_callback(saves);
    trainer.train();
    Weights final_weights = trainer.accelerator().get_state_dict(trainer.model());
    if (comm->rank() != 0) return;
    run = {saves, final_weights, trainer.state(), checkpoints_in(dir.path())};
    for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/checkpoint-4")) {
      run.files.push_back(entry.path().filename().string());
    }
  });
  // Under FULL_SHARD the weights were loaded from each process's shard file.
  const bool sharded =
      std::count(run.files.begin(), run.files.end(), "model_rank1.safetensors") == 1;
  EXPECT_EQ(sharded, GetParam());
  ASSERT_EQ(run.saves->weights.size(), 5u);
  EXPECT_TRUE(same_weights(run.final_weights, run.saves->weights.at(4)));
  EXPECT_FALSE(same_weights(run.final_weights, run.saves->weights.at(10)));
  EXPECT_EQ(run.state.best_metric, std::optional<double>(0.9));
  EXPECT_EQ(run.state.best_global_step, std::optional<int64_t>(4));
  EXPECT_EQ(run.state.best_model_checkpoint, dir.path() + "/checkpoint-4");
  EXPECT_EQ(run.state.global_step, 10) << "loading the weights keeps the run's counters";
  // save_total_limit 1: the best stays beside the newest while training,
  // and alone at the end.
  using Names = std::vector<std::string>;
  EXPECT_EQ(run.saves->left.at(2), Names({"checkpoint-2"}));
  EXPECT_EQ(run.saves->left.at(4), Names({"checkpoint-4"}));
  EXPECT_EQ(run.saves->left.at(6), Names({"checkpoint-4", "checkpoint-6"}));
  EXPECT_EQ(run.saves->left.at(10), Names({"checkpoint-4", "checkpoint-10"}));
  EXPECT_EQ(run.left, Names({"checkpoint-4"}));
}

INSTANTIATE_TEST_SUITE_P(DataParallelAndFullShard, BestModelUnder, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "FullShard" : "DataParallel";
                         });

TEST(BestModel, SaveTotalLimitKeepsTheBestAsTheSecondNewest) {
  accelerate::testing::TempDir dir;
  // No loading at the end: the metric alone protects the best checkpoint.
  const auto args = every_step(dir.path())
                        .max_steps(8)
                        .eval_steps(2)
                        .save_strategy(IntervalStrategy::kSteps)
                        .save_steps(2)
                        .save_total_limit(2)
                        .greater_is_better(false);
  on_one_rank(args, scripted({0.5, 0.1, 0.3, 0.4}), [&](TinyTrainer& trainer) {
    trainer.train();
    EXPECT_EQ(checkpoints_in(dir.path()),
              (std::vector<std::string>{"checkpoint-4", "checkpoint-8"}));
    EXPECT_EQ(trainer.state().best_global_step, std::optional<int64_t>(4));
  });
}

TEST(BestModel, AResumedRunRanksAgainstTheBestOfTheFirst) {
  accelerate::testing::TempDir dir;
  const auto args = every_step(dir.path())
                        .max_steps(6)
                        .eval_steps(2)
                        .save_strategy(IntervalStrategy::kSteps)
                        .save_steps(2);
  on_one_rank(args, scripted({0.9, 0.1, 0.2}), [&](TinyTrainer& trainer) { trainer.train(); });
  // From step 4: the best so far is step 2's 0.9, which 0.5 does not beat.
  const auto resumed = TrainingArguments(args).resume_from_checkpoint(dir.path() + "/checkpoint-4");
  on_one_rank(resumed, scripted({0.5}), [&](TinyTrainer& trainer) {
    trainer.train();
    EXPECT_EQ(trainer.state().best_metric, std::optional<double>(0.9));
    EXPECT_EQ(trainer.state().best_global_step, std::optional<int64_t>(2));
    EXPECT_EQ(trainer.state().best_model_checkpoint, dir.path() + "/checkpoint-2");
  });
}

}  // namespace trainer_control_test
