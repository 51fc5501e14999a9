// Saving tensor-parallel models through the Accelerator on thread ranks:
// save_model and get_state_dict write the whole model (bitwise the unsplit
// one), save_state writes split weights and optimizer state whole so that a
// checkpoint resumes at another tp (and dp) with the uninterrupted losses,
// and the Trainer trains at tp as on one process, with its checkpoints, or
// refuses before its first step where save_state cannot save.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/trainer/trainer.h"
#include "llama_tensor_parallel_training.h"

namespace llama_tensor_parallel_checkpoint_test {

using namespace llama_tensor_parallel_training;  // NOLINT: the shared helpers and names

// The steps from `from` on.
TEST(LlamaTensorParallelCheckpoint, ACheckpointAtTp2ResumesAtTp1AndTp2) {
  // tp 2 x dp 2 (2 windows a process) against tp 1 x dp 4 (1 a process):
  // the same global batch of 4, in the same order, on 4 processes.
  const auto tp2 = with(ParallelismConfig().tp_size(2));
  accelerate::testing::TempDir dir;
  const std::string folder = dir.path() + "/tp2";
  const SavedHalfway run = save_halfway(tp2, folder);
  const auto& saved = run.saved;
  const Leg &first = run.save, &second = run.resume;
  // Whole files: any tp reads them; each rank takes its parts of the
  // weights and of AdamW's moments.
  const auto same = curves_of(4, tp2, 2, second);
  expect_close(mean_losses(same, {0, 2}), run.after, 1e-6, "resumed at tp 2");
  const auto unsplit = curves_of(4, {}, 1, second);
  expect_close(mean_losses(unsplit, {0, 1, 2, 3}), run.after, 1e-5, "resumed at tp 1 x dp 4");
  for (int rank = 0; rank < 4; ++rank) {
    expect_weights_bitwise(same[rank], saved[0], "tp 2, rank " + std::to_string(rank));
    expect_weights_bitwise(unsplit[rank], saved[0], "tp 1, rank " + std::to_string(rank));
  }
  // And back: saved unsplit, resumed split.
  const std::string whole_folder = dir.path() + "/tp1";
  Leg save_whole = first, resume_split = second;
  save_whole.save_after = resume_split.resume_from = whole_folder;
  const auto saved_whole = curves_of(4, {}, 1, save_whole);
  const auto split = curves_of(4, tp2, 2, resume_split);
  expect_close(mean_losses(split, {0, 2}), mean_losses(unsplit, {0, 1, 2, 3}), 1e-5,
               "saved at tp 1, resumed at tp 2");
  expect_weights_bitwise(split[1], saved_whole[0], "saved at tp 1, resumed at tp 2");
}

// The batch the saved models are judged on.
at::Tensor judged_batch() { return token_windows().get(0).data.unsqueeze(0); }

// `folder`'s weights in a model built whole.
am::LlamaForCausalLM loaded_whole(const std::string& folder) {
  auto model = initial_model();
  accelerate::load_model(*model, folder);  // strict: every name, whole shapes
  return model;
}

void expect_saves_whole_model(const AcceleratorOptions& options, size_t batch) {
  accelerate::testing::TempDir dir;
  std::vector<double> trained_loss(4);
  run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm, options);
    auto model = initial_model();
    accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                         torch::optim::AdamWOptions(1e-2));
    accelerate::DataLoader loader(token_windows(), accelerate::DataLoaderOptions(batch));
    accelerator.prepare(model, optimizer, loader);
    accelerator.save_model(model, dir.path() + "/initial");
    // get_state_dict is the same whole tensors, on every process.
    for (const auto& [name, tensor] : accelerator.get_state_dict(model)) {
      EXPECT_EQ(tensor.dim(), 2 - (name.find("norm") != std::string::npos)) << name;
    }
    int steps = 0;
    for (auto& example : loader) {
      accelerator.backward(model->loss(example.data, example.target));
      optimizer.step();
      optimizer.zero_grad();
      if (++steps == 3) break;
    }
    accelerator.save_model(model, dir.path() + "/trained");
    // Training goes on from the parts the save put back.
    at::NoGradGuard no_grad;
    trained_loss[rank] = model->loss(judged_batch(), judged_batch()).item<double>();
  });
  const auto initial = loaded_whole(dir.path() + "/initial")->parameters();
  for (size_t i = 0; i < initial.size(); ++i) {
    EXPECT_TRUE(initial[i].equal(initial_parameters()[i])) << "parameter " << i << " bitwise";
  }
  at::NoGradGuard no_grad;
  const double loss =
      loaded_whole(dir.path() + "/trained")->loss(judged_batch(), judged_batch()).item<double>();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NEAR(trained_loss[rank], loss, 1e-6 * loss) << "rank " << rank;
  }
  EXPECT_NE(loss, initial_model()->loss(judged_batch(), judged_batch()).item<double>());
}

TEST(LlamaTensorParallelCheckpoint, SaveModelAtTp2WritesTheWholeModel) {
  expect_saves_whole_model(with(ParallelismConfig().tp_size(2)), 2);
}

TEST(LlamaTensorParallelCheckpoint, SaveModelAtTp2TimesZero3WritesTheWholeModel) {
  expect_saves_whole_model(with(ParallelismConfig().tp_size(2), zero3()), 2);
}

using LlamaTrainer = accelerate::Trainer<am::LlamaForCausalLM, accelerate::TensorDataset>;

accelerate::TrainingArguments trainer_arguments(const std::string& dir) {
  return accelerate::TrainingArguments()
      .output_dir(dir)
      .per_device_train_batch_size(2)
      .learning_rate(1e-2)
      .max_steps(kSteps)
      .max_grad_norm(kMaxNorm)
      .disable_tqdm(true)
      .save_strategy(accelerate::IntervalStrategy::kNo)
      .seed(3);
}

double trainer_loss(const accelerate::TrainingArguments& args, const AcceleratorOptions& options,
                    std::shared_ptr<Communicator> comm) {
  LlamaTrainer trainer([] { return initial_model(); }, args, token_windows(),
                       [](am::LlamaForCausalLM& model, const accelerate::Example& batch) {
                         return model->loss(batch.data, batch.target);
                       },
                       std::nullopt, options, std::move(comm));
  return trainer.train().training_loss;
}

TEST(LlamaTensorParallelTrainer, TheTrainerAtTp2TrainsAsOneProcess) {
  accelerate::testing::TempDir dir;
  const auto args = trainer_arguments(dir.path());
  double expected = 0;
  run_rank_communicators(
      1, [&](std::shared_ptr<Communicator> comm) { expected = trainer_loss(args, {}, comm); });
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const auto tp2 = with(ParallelismConfig().tp_size(2));
    EXPECT_NEAR(trainer_loss(args, tp2, comm), expected, 1e-5 * expected);
    // save_state checkpoints at tp (saved whole).
    auto saving = trainer_arguments(dir.path() + "/ddp");
    saving.save_strategy(accelerate::IntervalStrategy::kSteps).save_steps(4);
    EXPECT_NEAR(trainer_loss(saving, tp2, comm), expected, 1e-5 * expected);
  });
  // Under ZeRO-3 at tp (tp 2 x dp 2) too: the weights whole, each tp rank's
  // optimizer shards apart.
  run_rank_communicators(4, [&](std::shared_ptr<Communicator> comm) {
    const auto tp2_zero3 = with(ParallelismConfig().tp_size(2), zero3());
    auto saving = trainer_arguments(dir.path() + "/zero3");
    saving.save_strategy(accelerate::IntervalStrategy::kSteps).save_steps(4);
    EXPECT_GT(trainer_loss(saving, tp2_zero3, comm), 0.0);  // dp 2: another global batch
  });
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/zero3/checkpoint-4/optimizer_tp1_rank1.bin"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/ddp/checkpoint-4/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/zero3/checkpoint-4/model.safetensors"));
}

// A model of torch::nn layers, which no plan can split.
}  // namespace llama_tensor_parallel_checkpoint_test
