// The Trainer under a DeepSpeed config file, as transformers' Trainer
// (HfTrainerDeepSpeedConfig): max_grad_norm fills "gradient_clipping":
// "auto"; explicit file values that differ from the TrainingArguments are a
// one-line error naming both; grad_norm is logged; the zero3_init_flag note
// is left out when the Trainer builds the model under zero3_init. 2 thread ranks.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "accelerate/trainer/trainer.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"
#include "trainer/tiny_mlp.h"

namespace trainer_deepspeed_test {

using accelerate::Communicator;
using accelerate::TrainingArguments;

struct DsNetImpl : accelerate::testing::TinyMlpImpl {
  DsNetImpl() : TinyMlpImpl(4, 1, 31) {}
};
TORCH_MODULE(DsNet);

using DsTrainer = accelerate::Trainer<DsNet, accelerate::TensorDataset>;

accelerate::TensorDataset ds_data() {
  auto generator = at::detail::createCPUGenerator(7);
  auto x = at::randn({64, 4}, generator);
  return accelerate::TensorDataset(x, x.sin().sum(1, true));
}

at::Tensor ds_loss(DsNet& model, const accelerate::Example& batch) {
  return torch::mse_loss(model->forward(batch.data), batch.target);
}

TrainingArguments ds_args(const std::string& dir) {
  return TrainingArguments()
      .output_dir(dir)
      .per_device_train_batch_size(4)
      .gradient_accumulation_steps(2)
      .learning_rate(0.02)
      .max_steps(6)
      .logging_steps(1)
      .save_strategy(accelerate::IntervalStrategy::kNo)
      .disable_tqdm(true)
      .seed(3);
}

std::string write_config(const std::string& dir, const std::string& json) {
  const std::string path = dir + "/ds_config.json";
  std::ofstream(path) << json;
  return path;
}

// HF's templates: everything the Trainer decides is "auto".
const char* kAutoConfig = R"({
  "zero_optimization": {"stage": 2},
  "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto"
})";

struct DsRun {
  std::vector<at::Tensor> weights;
  std::vector<accelerate::Metrics> logs;
};

DsRun run_ds(const TrainingArguments& args, const std::optional<std::string>& config) {
  DsRun result;
  accelerate::AcceleratorOptions options;
  if (config) {
    options.deepspeed_plugin(accelerate::DeepSpeedPlugin().hf_ds_config(*config));
  }
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    DsNet model;
    DsTrainer trainer(model, args, ds_data(), ds_loss, std::nullopt, options, comm);
    trainer.train();
    if (comm->rank() != 0) return;
    for (const auto& p : model->parameters()) result.weights.push_back(p.detach().clone());
    result.logs = trainer.state().log_history;
  });
  return result;
}

bool all_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::allclose(a[i], b[i], 1e-5, 1e-6)) return false;
  }
  return true;
}

TEST(TrainerDeepSpeed, MaxGradNormFillsAutoClipping) {
  accelerate::testing::TempDir dir;
  const std::string config = write_config(dir.path(), kAutoConfig);
  const DsRun tiny = run_ds(ds_args(dir.path()).max_grad_norm(1e-6), config);
  const DsRun usual = run_ds(ds_args(dir.path()), config);
  // Clipping to 1e-6 barely moves the weights: not the default run...
  EXPECT_FALSE(all_close(tiny.weights, usual.weights));
  // ...but data parallelism with the same max_grad_norm.
  const DsRun data_parallel = run_ds(ds_args(dir.path()).max_grad_norm(1e-6), std::nullopt);
  EXPECT_TRUE(all_close(tiny.weights, data_parallel.weights));
}

TEST(TrainerDeepSpeed, GradNormIsLoggedAsUnderDataParallelism) {
  accelerate::testing::TempDir dir;
  const std::string config = write_config(dir.path(), kAutoConfig);
  const DsRun sharded = run_ds(ds_args(dir.path()), config);
  const DsRun data_parallel = run_ds(ds_args(dir.path()), std::nullopt);
  ASSERT_EQ(sharded.logs.size(), data_parallel.logs.size());
  int compared = 0;
  for (std::size_t i = 0; i < sharded.logs.size(); ++i) {
    if (!data_parallel.logs[i].count("grad_norm")) continue;
    ASSERT_TRUE(sharded.logs[i].count("grad_norm")) << "log " << i << " has no grad_norm";
    EXPECT_NEAR(sharded.logs[i].at("grad_norm"), data_parallel.logs[i].at("grad_norm"), 1e-5);
    EXPECT_NEAR(sharded.logs[i].at("loss"), data_parallel.logs[i].at("loss"), 1e-5);
    EXPECT_DOUBLE_EQ(sharded.logs[i].at("epoch"), data_parallel.logs[i].at("epoch"));
    ++compared;
  }
  EXPECT_EQ(compared, 6);
}

TEST(TrainerDeepSpeed, ExplicitFileValuesThatDifferAreOneLineErrorsNamingBoth) {
  accelerate::testing::TempDir dir;
  const std::string config = write_config(dir.path(), R"({
    "zero_optimization": {"stage": 2},
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 0.5,
    "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}
  })");
  try {
    accelerate::TrainerLoop::accelerator_options(
        ds_args(dir.path()), accelerate::AcceleratorOptions().deepspeed_plugin(
                                 accelerate::DeepSpeedPlugin().hf_ds_config(config)));
    ADD_FAILURE() << "no error";
  } catch (const accelerate::ConfigError& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const char* part :
         {"gradient_accumulation_steps=1 vs gradient_accumulation_steps=2",
          "gradient_clipping=0.5 vs max_grad_norm=1",
          "optimizer.params.lr=0.001 vs learning_rate=0.02", "bf16.enabled=true vs bf16=false"}) {
      EXPECT_NE(message.find(part), std::string::npos) << part << " not in: " << message;
    }
    EXPECT_EQ(message.find("train_micro_batch_size_per_gpu"), std::string::npos) << message;
  }
  // The same values, matched, are accepted.
  EXPECT_NO_THROW(accelerate::TrainerLoop::accelerator_options(
      ds_args(dir.path())
          .gradient_accumulation_steps(1)
          .max_grad_norm(0.5)
          .learning_rate(0.001)
          .bf16(true),
      accelerate::AcceleratorOptions().deepspeed_plugin(
          accelerate::DeepSpeedPlugin().hf_ds_config(config))));
}

// FSDP's cpu_ram_efficient_loading (DeepSpeed's zero3_init_flag): the note
// asking to build the model inside zero3_init() is for programs that did not.
TEST(TrainerDeepSpeed, Zero3InitNoteOnlyWhenTheModelWasBuiltOutsideIt) {
  accelerate::testing::TempDir dir;
  const auto options = accelerate::AcceleratorOptions().fsdp_plugin(
      accelerate::FullyShardedDataParallelPlugin().cpu_ram_efficient_loading(true));
  const auto stderr_of = [&](bool model_init) {
    testing::internal::CaptureStderr();
    accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
      if (model_init) {
        DsTrainer trainer([] { return DsNet(); }, ds_args(dir.path()).max_steps(1), ds_data(),
                          ds_loss, std::nullopt, options, comm);
        trainer.train();
      } else {
        DsNet model;
        DsTrainer trainer(model, ds_args(dir.path()).max_steps(1), ds_data(), ds_loss, std::nullopt,
                          options, comm);
        trainer.train();
      }
    });
    return testing::internal::GetCapturedStderr();
  };
  const std::string note = "build the model inside accelerator.zero3_init()";
  EXPECT_EQ(stderr_of(/*model_init=*/true).find(note), std::string::npos);
  EXPECT_NE(stderr_of(/*model_init=*/false).find(note), std::string::npos);
}

}  // namespace trainer_deepspeed_test
