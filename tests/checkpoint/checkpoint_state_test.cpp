// Accelerator::save_state / load_state in one test process (ranks as
// threads): what goes in, that it comes back exactly, automatic naming and
// total_limit, hooks, registered objects, save_model, and the errors for a
// different world size, a missing file or a shape mismatch. Exact resume of
// real training and killed saves: checkpoint_resume_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "support/error_message.h"
#include "support/process_runner.h"
#include "support/thread_ranks.h"

namespace accelerate {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TemporaryFolder;

// A model, optimizer, scheduler and shuffled loader, prepared.
struct TrainingRun {
  explicit TrainingRun(std::shared_ptr<Communicator> comm, AcceleratorOptions options = {},
                       int64_t in = 4)
      : accelerator(std::move(comm), std::move(options)),
        model(torch::nn::Linear(in, 3)),
        optimizer(model->parameters(), torch::optim::AdamOptions(0.1)),
        scheduler(optimizer, 2, 0.5),
        loader(TensorDataset(at::arange(64 * in, at::kFloat).reshape({64, in}) / 100,
                             at::zeros({64, 3})),
               DataLoaderOptions(4).shuffle(true)) {
    accelerator.prepare(model, optimizer, scheduler, loader);
  }
  // `steps` training steps (dropout on the input) from where the loader
  // stands, calling after_step(n) after the n-th; leaves the loop after the
  // last (a real run would save inside the loop too).
  void train(int steps, const std::function<void(int)>& after_step = {}) {
    int done = 0;
    while (done < steps) {
      for (auto& batch : loader) {
        auto input = torch::dropout(batch.data, 0.5, /*train=*/true);
        accelerator.backward(model->forward(input).pow(2).mean());
        optimizer.step();
        scheduler.step();
        optimizer.zero_grad();
        ++done;
        if (after_step) after_step(done);
        if (done == steps) return;
      }
    }
  }
  std::vector<at::Tensor> weights() const {
    return {model->weight.detach().clone(), model->bias.detach().clone()};
  }

  Accelerator accelerator;
  torch::nn::Linear model;
  Optimizer<torch::optim::Adam> optimizer;
  Scheduler<torch::optim::StepLR> scheduler;
  DataLoader<TensorDataset> loader;
};

void expect_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << a[i] << b[i];
}

using testing::error_of;

TEST(CheckpointSaveState, ResumingContinuesExactlyAsIfUninterrupted) {
  TemporaryFolder tmp;
  const std::string dir = tmp.path() + "/ckpt";
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    torch::manual_seed(0);
    TrainingRun first(comm);
    DataLoaderPosition saved_position;
    double saved_lr = 0;
    first.train(25, [&](int step) {
      if (step != 5) return;  // mid-epoch (16 batches per epoch)
      EXPECT_EQ(first.accelerator.save_state(dir), fs::absolute(dir).string());
      saved_position = first.loader.position();
      saved_lr = first.optimizer.param_groups()[0].options().get_lr();
    });
    const auto expected = first.weights();
    EXPECT_EQ(saved_position.batches_yielded, 5u);

    torch::manual_seed(123);  // a different start: everything must come from the checkpoint
    TrainingRun second(comm);
    second.accelerator.load_state(dir);
    EXPECT_EQ(second.optimizer.param_groups()[0].options().get_lr(), saved_lr);
    EXPECT_EQ(second.scheduler.steps_taken(), 5);
    EXPECT_EQ(second.accelerator.gradient_state()->optimizer_steps(), 5);
    EXPECT_EQ(second.loader.position(), saved_position);
    second.train(20);
    expect_equal(second.weights(), expected);
  });
  for (const char* file : {"model.safetensors", "optimizer.bin", "optimizer.safetensors",
                           "scheduler.bin", "random_states_0.bin", "accelerate_checkpoint.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(dir) / file)) << file;
  }
}

AcceleratorOptions numbered(const std::string& project, std::optional<int64_t> limit = {}) {
  AcceleratorOptions options;
  ProjectConfiguration config;
  config.automatic_checkpoint_naming(true).total_limit(limit);
  options.project_config(config).project_dir(project);
  return options;
}

TEST(CheckpointSaveState, AutomaticNamingKeepsTheNumericallyNewestTotalLimit) {
  TemporaryFolder tmp;
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    TrainingRun setup(comm, numbered(tmp.path(), 2));
    EXPECT_EQ(*setup.accelerator.logging_dir(), tmp.path());  // defaults to project_dir
    for (int i = 0; i <= 10; ++i) {
      EXPECT_EQ(setup.accelerator.save_state(),
                tmp.path() + "/checkpoints/checkpoint_" + std::to_string(i));
    }
    EXPECT_EQ(setup.accelerator.save_iteration(), 11);
  });
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(tmp.path() + "/checkpoints")) {
    left.push_back(entry.path().filename());
  }
  std::sort(left.begin(), left.end());
  EXPECT_THAT(left, ::testing::ElementsAre("checkpoint_10", "checkpoint_9"));
}

TEST(CheckpointLoadState, WithoutAFolderLoadsTheNewestCompleteOneAndNumbersOnFromIt) {
  TemporaryFolder tmp;
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    std::vector<at::Tensor> at_second_save;
    {
      // The third save fails after its metadata is written, before the
      // rename (what a killed main process leaves behind).
      bool fail = false;
      auto options = numbered(tmp.path());
      options.checkpoint_options().stage_observer([&](CheckpointStage stage, const std::string&) {
        if (fail && stage == CheckpointStage::kMetadataWritten)
          throw std::runtime_error("power cut");
      });
      TrainingRun run(comm, options);
      for (int i = 0; i < 3; ++i) {
        run.train(1);
        fail = i == 2;
        if (fail) {
          EXPECT_THAT(error_of([&] { run.accelerator.save_state(); }), HasSubstr("power cut"));
        } else {
          run.accelerator.save_state();
        }
        if (i == 1) at_second_save = run.weights();
      }
    }
    EXPECT_TRUE(fs::exists(tmp.path() + "/checkpoints/.checkpoint_2.incomplete/" +
                           kCheckpointMetadataFile));
    fs::create_directories(tmp.path() + "/checkpoints/checkpoint_7");  // not a checkpoint
    TrainingRun resumed(comm, numbered(tmp.path()));
    EXPECT_EQ(resumed.accelerator.load_state(), tmp.path() + "/checkpoints/checkpoint_1");
    expect_equal(resumed.weights(), at_second_save);
    EXPECT_EQ(resumed.accelerator.save_iteration(), 2);
    EXPECT_EQ(resumed.accelerator.save_state(), tmp.path() + "/checkpoints/checkpoint_2");
    EXPECT_TRUE(is_complete_checkpoint(tmp.path() + "/checkpoints/checkpoint_2"));

    TrainingRun fresh(comm, numbered(tmp.path() + "/empty"));
    EXPECT_THAT(error_of([&] { fresh.accelerator.load_state(); }),
                HasSubstr("no complete checkpoint in " + tmp.path() + "/empty/checkpoints"));
    TrainingRun restarted(comm, numbered(tmp.path()));  // iteration 0 again: would overwrite
    EXPECT_THAT(error_of([&] { restarted.accelerator.save_state(); }),
                HasSubstr("checkpoints/checkpoint_0 already exists"));
  });
}

TEST(CheckpointLoadState, RefusesAnotherWorldSizeAMissingFileAndAShapeMismatch) {
  TemporaryFolder tmp;
  const std::string two = tmp.path() + "/two", one = tmp.path() + "/one";
  testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    TrainingRun setup(comm);
    setup.accelerator.save_state(two);
  });
  EXPECT_TRUE(fs::exists(two + "/random_states_0.bin"));
  EXPECT_TRUE(fs::exists(two + "/random_states_1.bin"));
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    TrainingRun setup(comm);
    EXPECT_THAT(error_of([&] { setup.accelerator.load_state(two); }),
                HasSubstr("checkpoint " + two + " was saved by 2 processes but this job has 1"));
    setup.accelerator.save_state(one);
    fs::remove(one + "/optimizer.bin");
    EXPECT_THAT(error_of([&] { setup.accelerator.load_state(one); }),
                HasSubstr("checkpoint file " + one + "/optimizer.bin is missing"));
    setup.accelerator.save_state(one);
    TrainingRun wider(comm, {}, /*in=*/5);
    const auto before = wider.weights();
    const auto lr = wider.optimizer.param_groups()[0].options().get_lr();
    auto message = error_of([&] { wider.accelerator.load_state(one); });
    EXPECT_THAT(message, HasSubstr("model.safetensors"));
    EXPECT_THAT(message, HasSubstr("weight"));
    expect_equal(wider.weights(), before);  // refused before anything changed
    EXPECT_EQ(wider.optimizer.param_groups()[0].options().get_lr(), lr);
  });
}

// Anything with save/load archive members.
struct Counter {
  int64_t value = 0;
  void save(torch::serialize::OutputArchive& archive) const {
    archive.write("value", c10::IValue(value));
  }
  void load(torch::serialize::InputArchive& archive) {
    c10::IValue v;
    archive.read("value", v);
    value = v.toInt();
  }
};

TEST(CheckpointSaveState, RegisteredObjectsComeBack) {
  TemporaryFolder tmp;
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    Counter counter;
    torch::nn::Linear extra(2, 2);
    TrainingRun setup(comm);
    setup.accelerator.register_for_checkpointing(counter, extra);
    counter.value = 42;
    const auto extra_weight = extra->weight.detach().clone();
    setup.accelerator.save_state(tmp.path());
    counter.value = 0;
    torch::NoGradGuard no_grad;
    extra->weight.zero_();
    setup.accelerator.load_state(tmp.path());
    EXPECT_EQ(counter.value, 42);
    EXPECT_TRUE(torch::equal(extra->weight, extra_weight));
    EXPECT_TRUE(fs::exists(tmp.path() + "/custom_checkpoint_0.bin"));
    EXPECT_TRUE(fs::exists(tmp.path() + "/custom_checkpoint_1.bin"));

    TrainingRun fewer(comm);  // nothing registered
    EXPECT_THAT(error_of([&] { fewer.accelerator.load_state(tmp.path()); }),
                HasSubstr("holds 2 registered objects but this Accelerator has 0"));
  });
}

TEST(CheckpointSaveState, PreHooksSeeTheModelsAndWriteIntoTheCheckpoint) {
  TemporaryFolder tmp;
  const std::string dir = tmp.path() + "/ckpt";
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    TrainingRun setup(comm);
    int save_calls = 0;
    auto handle = setup.accelerator.register_save_state_pre_hook(
        [&](std::vector<torch::nn::Module*>& models, std::vector<NamedTensors>& weights,
            const std::string& output_dir) {
          ++save_calls;
          EXPECT_EQ(models.size(), 1u);
          EXPECT_EQ(weights.at(0).at(0).first, "weight");
          // Save the model our own way instead.
          std::ofstream(output_dir + "/adapter.txt") << "mine";
          models.clear();
          weights.clear();
        });
    std::string seen_dir;
    setup.accelerator.register_load_state_pre_hook(
        [&](std::vector<torch::nn::Module*>& models, const std::string& input_dir) {
          seen_dir = input_dir;
          models.clear();
        });
    setup.accelerator.save_state(dir);
    EXPECT_TRUE(fs::exists(dir + "/adapter.txt"));
    EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
    setup.accelerator.load_state(dir);
    EXPECT_EQ(seen_dir, dir);
    handle.remove();
    setup.accelerator.save_state(dir);
    EXPECT_EQ(save_calls, 1);
    EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
  });
}

TEST(CheckpointSaveModel, OnlyTheMainProcessWritesAndEveryoneSeesTheFile) {
  TemporaryFolder tmp;
  testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    TrainingRun setup(comm);
    auto files = setup.accelerator.save_model(setup.model, tmp.path() + "/export");
    EXPECT_EQ(files.size(), comm->rank() == 0 ? 1u : 0u);
    EXPECT_TRUE(fs::exists(tmp.path() + "/export/model.safetensors"));
  });
}

TEST(CheckpointSaveState, TheFp16LossScalerComesBack) {
  TemporaryFolder tmp;
  testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    AcceleratorOptions options;
    // fp16 loss scaling without autocast (CPU autocast has no fp16).
    options.mixed_precision(accelerate::MixedPrecision::kFP16)
        .autocast_kwargs(AutocastOptions().enabled(false))
        .grad_scaler_kwargs(GradScalerOptions().init_scale(1024).growth_interval(2));
    TrainingRun run(comm, options);
    ASSERT_NE(run.accelerator.scaler(), nullptr);
    run.train(5);  // grows the scale every 2 clean steps
    const double scale = run.accelerator.scaler()->get_scale();
    const auto tracker = run.accelerator.scaler()->growth_tracker();
    EXPECT_GT(scale, 1024);
    run.accelerator.save_state(tmp.path());
    EXPECT_TRUE(fs::exists(tmp.path() + "/scaler.pt"));

    TrainingRun resumed(comm, options);
    EXPECT_EQ(resumed.accelerator.scaler()->get_scale(), 1024);
    resumed.accelerator.load_state(tmp.path());
    EXPECT_EQ(resumed.accelerator.scaler()->get_scale(), scale);
    EXPECT_EQ(resumed.accelerator.scaler()->growth_tracker(), tracker);

    TrainingRun without(comm);  // fp32: a checkpoint with a scaler does not fit
    EXPECT_THAT(error_of([&] { without.accelerator.load_state(tmp.path()); }),
                HasSubstr("has scaler.pt but this Accelerator does not use fp16 loss scaling"));
  });
}

}  // namespace
}  // namespace accelerate
