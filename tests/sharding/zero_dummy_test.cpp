// DummyOptim and DummyScheduler: prepare() builds the optimizer and the
// schedule a DeepSpeed config file's sections describe ("auto" taken from
// the stand-ins), and training with them equals training with the same
// optimizer and schedule declared in code; a file or job without the
// section is refused as Accelerate refuses it, and so are types and
// parameters accelerate-cpp cannot build. Ranks are threads with real
// collectives.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "accelerate/sharding/dummy_optim.h"
#include "accelerate/sharding/dummy_scheduler.h"
#include "sharding/zero_test_model.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace zero_dummy_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::testing::ZeroNet;
using ::testing::HasSubstr;

std::string config_file(const std::string& name, const std::string& sections) {
  const std::string path = ::testing::TempDir() + "zero_dummy_" + name + ".json";
  std::ofstream(path) << R"({"zero_optimization": {"stage": 2}, "gradient_clipping": 0,)"
                      << R"( "train_micro_batch_size_per_gpu": "auto")"
                      << (sections.empty() ? "" : ", " + sections) << "}";
  return path;
}

const char* kSections = R"("optimizer": {"type": "Adam", "params": {"lr": "auto",
      "weight_decay": "auto", "betas": [0.8, 0.99], "torch_adam": true}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
      "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto",
      "warmup_type": "linear"}})";

AcceleratorOptions options_for(const std::string& file) {
  return AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin().hf_ds_config(file));
}

using Loader = accelerate::DataLoader<accelerate::TensorDataset>;

struct Outcome {
  std::vector<at::Tensor> parameters;
  std::vector<double> rates;  // the learning rate before each step
  std::string built_type;     // what the DummyOptim became
};

// Trains ZeroNet for 12 steps on 2 ranks; `body` prepares and steps.
using Loop = std::function<void(Accelerator&, ZeroNet&, Loader&, Outcome&)>;

Outcome train_on_two(const AcceleratorOptions& options, const Loop& body) {
  Outcome result;
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm, options);
    ZeroNet model;
    accelerate::DataLoader loader(accelerate::testing::zero_data(96),
                                  accelerate::DataLoaderOptions(4));
    Outcome run;
    body(accelerator, model, loader, run);
    for (const auto& p : model->parameters()) run.parameters.push_back(p.detach().clone());
    if (comm->rank() == 0) result = run;
  });
  return result;
}

template <class Optimizer, class Scheduler>
void steps(Accelerator& accelerator, ZeroNet& model, Loader& loader, Optimizer& optimizer,
           Scheduler& scheduler, Outcome& run) {
  for (auto& batch : loader) {
    run.rates.push_back(optimizer.base_optimizer().param_groups()[0].options().get_lr());
    accelerator.backward(torch::mse_loss(model->forward(batch.data, true), batch.target));
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
  }
}

TEST(ZeroDummy, BuildsTheFilesOptimizerAndScheduleAndTrainsAsTheSameDeclaredInCode) {
  const std::string file = config_file("sections", kSections);
  ::testing::internal::CaptureStderr();
  const Outcome dummies = train_on_two(
      options_for(file),
      [](Accelerator& accelerator, ZeroNet& model, Loader& loader, Outcome& run) {
        accelerate::DummyOptim optimizer(model->parameters(), /*lr=*/0.02, /*weight_decay=*/0.1);
        // 24 steps over both processes: 12 on each.
        accelerate::DummyScheduler scheduler(optimizer, /*total_num_steps=*/24,
                                             /*warmup_num_steps=*/4);
        accelerator.prepare(model, scheduler, optimizer, loader);  // any order in one call
        run.built_type = optimizer.type();
        EXPECT_NE(dynamic_cast<torch::optim::AdamW*>(&optimizer.base_optimizer()), nullptr)
            << "DeepSpeed's Adam decouples weight decay unless adam_w_mode is false";
        steps(accelerator, model, loader, optimizer, scheduler, run);
      });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, ::testing::Not(HasSubstr("section (Adam) is not used")));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("section (WarmupDecayLR) is not used")));
  EXPECT_EQ(dummies.built_type, "Adam");

  const Outcome declared = train_on_two(
      options_for(config_file("none", "")),
      [](Accelerator& accelerator, ZeroNet& model, Loader& loader, Outcome& run) {
        accelerate::Optimizer<torch::optim::AdamW> optimizer(
            model->parameters(),
            torch::optim::AdamWOptions(0.02).weight_decay(0.1).betas({0.8, 0.99}));
        accelerate::Scheduler<accelerate::DeepSpeedSchedule> scheduler(
            optimizer,
            accelerate::DeepSpeedScheduleOptions(accelerate::DeepSpeedScheduleType::kWarmupDecayLR)
                .warmup_min_lr(0)
                .warmup_max_lr(0.02)
                .warmup_num_steps(4)
                .total_num_steps(12)
                .warmup_type("linear"));
        accelerator.prepare(model, optimizer, loader, scheduler);
        steps(accelerator, model, loader, optimizer, scheduler, run);
      });
  ASSERT_EQ(dummies.rates.size(), 12u);
  EXPECT_EQ(dummies.rates, declared.rates);
  EXPECT_DOUBLE_EQ(dummies.rates[3], 0.02 * 2 / 4);   // warming up linearly over 4
  EXPECT_DOUBLE_EQ(dummies.rates[11], 0.02 * 2 / 8);  // (12 - 10) / (12 - 4), decaying
  ASSERT_EQ(dummies.parameters.size(), declared.parameters.size());
  for (std::size_t i = 0; i < dummies.parameters.size(); ++i) {
    EXPECT_TRUE(at::equal(dummies.parameters[i], declared.parameters[i])) << "parameter " << i;
  }
}

TEST(ZeroDummy, ADeclaredOptimizerBesideTheSectionsIsUsedAndSaysSo) {
  const std::string file = config_file("declared", kSections);
  ::testing::internal::CaptureStderr();
  train_on_two(options_for(file),
               [](Accelerator& accelerator, ZeroNet& model, Loader& loader, Outcome&) {
                 accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                                    torch::optim::SGDOptions(0.01));
                 accelerator.prepare(model, optimizer, loader);
               });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("the optimizer section (Adam) is not used"));
  EXPECT_THAT(err, HasSubstr("the scheduler section (WarmupDecayLR) is not used"));
}

// The ConfigError prepare() throws on rank 0 ("" for none).
std::string refusal(const AcceleratorOptions& options, bool with_scheduler) {
  std::string message;
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm, options);
    ZeroNet model;
    Loader loader(accelerate::testing::zero_data(16), accelerate::DataLoaderOptions(4));
    accelerate::DummyOptim optimizer(model->parameters());
    accelerate::DummyScheduler scheduler(optimizer, 100, 10);
    try {
      if (with_scheduler) {
        accelerator.prepare(model, optimizer, loader, scheduler);
      } else {
        accelerator.prepare(model, optimizer, loader);
      }
    } catch (const accelerate::ConfigError& error) {
      if (comm->rank() == 0) message = error.what();
    }
  });
  return message;
}

TEST(ZeroDummy, RefusesWhatItCannotStandInFor) {
  EXPECT_THAT(refusal(AcceleratorOptions(), false),
              HasSubstr("DummyOptim stands in for the optimizer of a DeepSpeed config file, and "
                        "this job has no DeepSpeed settings"));
  EXPECT_THAT(
      refusal(AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin().zero_stage(2)), false),
      HasSubstr("the job has no DeepSpeed config file, so DummyOptim has nothing to stand "
                "in for (Accelerate refuses it too)"));
  const std::string no_sections = config_file("no_sections", "");
  EXPECT_EQ(refusal(options_for(no_sections), false),
            no_sections +
                ": the file has no optimizer section, so DummyOptim has nothing to "
                "stand in for (Accelerate refuses it too): write the section, or "
                "declare accelerate::Optimizer<YourOptimizer> instead");
  const std::string optimizer_only = config_file(
      "optimizer_only", R"("optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9}})");
  EXPECT_EQ(refusal(options_for(optimizer_only), false), "");
  EXPECT_THAT(refusal(options_for(optimizer_only), true),
              HasSubstr("the file has no scheduler section, so DummyScheduler has nothing"));
  const auto with_optimizer = [](const std::string& name, const std::string& section) {
    return options_for(config_file(name, R"("optimizer": )" + section));
  };
  EXPECT_THAT(refusal(with_optimizer("lamb", R"({"type": "Lamb", "params": {}})"), false),
              HasSubstr(": optimizer type \"Lamb\" is not available in accelerate-cpp"));
  EXPECT_THAT(refusal(with_optimizer("unknown_key",
                                     R"({"type": "AdamW", "params": {"lr": 0.1, "foo": 1}})"),
                      false),
              HasSubstr(": optimizer.params.foo is not a parameter of AdamW in accelerate-cpp"));
  EXPECT_THAT(
      refusal(with_optimizer("bad_betas", R"({"type": "AdamW", "params": {"betas": [0.9]}})"),
              false),
      HasSubstr(": optimizer.params.betas expects a list of two numbers"));
  EXPECT_THAT(
      refusal(with_optimizer("clip", R"({"type": "Adam", "params": {"max_grad_norm": 1}})"), false),
      HasSubstr(": optimizer.params.max_grad_norm is not supported as an optimizer parameter"));
  EXPECT_THAT(
      refusal(with_optimizer("amsgrad", R"({"type": "AdamW", "params": {"amsgrad": true}})"),
              false),
      HasSubstr(": optimizer.params.amsgrad true needs \"torch_adam\": true"));
  const std::string one_cycle =
      config_file("one_cycle", R"("optimizer": {"type": "AdamW", "params": {}},
          "scheduler": {"type": "OneCycle", "params": {}})");
  EXPECT_THAT(refusal(options_for(one_cycle), true),
              HasSubstr(": scheduler type \"OneCycle\" is not available in accelerate-cpp; use "
                        "WarmupLR, WarmupDecayLR or WarmupCosineLR"));
}

// save_state / load_state keep the DummyScheduler's position: a run resumed
// from step 5 sets the same rates as the uninterrupted one.
TEST(ZeroDummy, ScheduleResumesFromACheckpoint) {
  const std::string file = config_file("resume", kSections);
  accelerate::testing::TempDir dir("zero-dummy-checkpoint");
  const auto run = [&](bool resume) {
    return train_on_two(options_for(file), [&](Accelerator& accelerator, ZeroNet& model,
                                               Loader& loader, Outcome& out) {
      accelerate::DummyOptim optimizer(model->parameters(), 0.02, 0.1);
      accelerate::DummyScheduler scheduler(optimizer, 24, 4);
      accelerator.prepare(model, optimizer, loader, scheduler);
      if (resume) accelerator.load_state(dir.path());
      int step = 0;
      for (auto& batch : loader) {
        if (resume && out.rates.empty()) {
          out.rates.push_back(optimizer.base_optimizer().param_groups()[0].options().get_lr());
        }
        accelerator.backward(torch::mse_loss(model->forward(batch.data, true), batch.target));
        optimizer.step();
        scheduler.step();
        optimizer.zero_grad();
        if (!resume && ++step == 5) {
          accelerator.save_state(dir.path());
          out.rates.push_back(optimizer.base_optimizer().param_groups()[0].options().get_lr());
        }
      }
    });
  };
  const Outcome saved = run(false);
  const Outcome resumed = run(true);
  ASSERT_EQ(saved.rates.size(), 1u);
  ASSERT_EQ(resumed.rates.size(), 1u);
  EXPECT_GT(saved.rates[0], 0.0);
  EXPECT_EQ(resumed.rates[0], saved.rates[0]);
  for (std::size_t i = 0; i < saved.parameters.size(); ++i) {
    EXPECT_TRUE(at::equal(resumed.parameters[i], saved.parameters[i])) << "parameter " << i;
  }
}

}  // namespace zero_dummy_test
