// The MNIST example with the extras of Accelerate's "complete" examples
// (`mnist_complete --help` lists these and train.cpp's flags):
//   --with_tracking              log accuracy and loss (TensorBoard, JSONL, CSV)
//   --project_dir DIR            where the trackers write        [mnist_logs]
//   --output_dir DIR             checkpoints and the final model [mnist_output]
//   --checkpointing_steps N|epoch  save_state every N steps, or after each epoch
//   --resume_from_checkpoint PATH|latest  continue exactly where a checkpoint
//                                left off (latest: the newest complete one)
// Checkpoints go to DIR/checkpoints/checkpoint_K (automatic naming), the final
// model to DIR/model/model.safetensors. train.cpp is the minimal version.
#include <torch/torch.h>

#include <accelerate/accelerate.h>
#include <accelerate/data/mnist.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>

#include "mnist_common.h"

namespace {

struct CompleteArgs {
  bool with_tracking = false;
  std::string project_dir = "mnist_logs";
  std::string output_dir = "mnist_output";
  int64_t checkpoint_every_steps = 0;  // 0: not by steps
  bool checkpoint_every_epoch = false;
  std::string resume_from_checkpoint;  // "", a folder, or "latest"
};

// --checkpointing_steps: "epoch", or a number of steps >= 1.
bool set_checkpointing_steps(CompleteArgs& args, const std::string& value) {
  if (value.empty()) return true;
  if (value == "epoch") {
    args.checkpoint_every_epoch = true;
    return true;
  }
  char* end = nullptr;
  const long long steps = std::strtoll(value.c_str(), &end, 10);
  if (*end != '\0' || steps < 1) return false;
  args.checkpoint_every_steps = steps;
  return true;
}

}  // namespace

int main(int argc, char** argv) try {
  mnist::Args args;
  CompleteArgs extra;
  std::string checkpointing_steps;
  examples::Flags flags(std::string(mnist::kAbout) +
                        "\nWith the extras of Accelerate's \"complete\" examples: tracking, "
                        "checkpoints, resuming.");
  mnist::add_flags(flags, args);
  flags
      .add("with_tracking", &extra.with_tracking, "log accuracy and loss (TensorBoard, JSONL, CSV)")
      .add("project_dir", &extra.project_dir, "where the trackers write", "DIR")
      .add("output_dir", &extra.output_dir, "checkpoints and the final model", "DIR")
      .add("checkpointing_steps", &checkpointing_steps,
           "save_state every N steps, or after each epoch (default: never)", "N|epoch")
      .add("resume_from_checkpoint", &extra.resume_from_checkpoint,
           "continue exactly where a checkpoint left off (latest: the newest complete one)",
           "PATH|latest");
  flags.parse(argc, argv);
  if (!set_checkpointing_steps(extra, checkpointing_steps)) {
    flags.fail("--checkpointing_steps expects a number >= 1 or 'epoch', got '" +
               checkpointing_steps + "'");
  }
  mnist::check_data_dir(flags, args);
  mnist::set_up(args);

  accelerate::AcceleratorOptions options;
  options.project_config(accelerate::ProjectConfiguration()
                             .project_dir(extra.output_dir)
                             .logging_dir(extra.project_dir)
                             .automatic_checkpoint_naming(true));
  if (extra.with_tracking) options.log_with({"all"});
  accelerate::Accelerator accelerator(options);
  mnist::BasicNet model;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(args.lr));
  // Prepared, so that checkpoints hold its state too.
  accelerate::Scheduler<torch::optim::StepLR> scheduler(optimizer, /*step_size=*/30, /*gamma=*/0.1);
  accelerate::DataLoader train(
      accelerate::MnistDataset(args.data_dir, accelerate::MnistSplit::kTrain),
      accelerate::DataLoaderOptions(args.batch_size).shuffle(true));
  accelerate::DataLoader test(
      accelerate::MnistDataset(args.data_dir, accelerate::MnistSplit::kTest),
      accelerate::DataLoaderOptions(1000));
  accelerator.prepare(model, optimizer, scheduler, train, test);
  if (extra.with_tracking) {
    accelerator.init_trackers("mnist", {{"lr", args.lr},
                                        {"batch_size", static_cast<int64_t>(args.batch_size)},
                                        {"epochs", static_cast<int64_t>(args.epochs)},
                                        {"seed", static_cast<int64_t>(args.seed)}});
  }

  // Model, optimizer, scheduler, random states and the loader's position
  // (epoch and batches consumed) all come back: the loop below simply goes on.
  if (!extra.resume_from_checkpoint.empty()) {
    const std::optional<std::string> folder =
        extra.resume_from_checkpoint == "latest"
            ? std::nullopt
            : std::optional<std::string>(extra.resume_from_checkpoint);
    accelerator.print("resuming from ", accelerator.load_state(folder));
  }
  const accelerate::DataLoaderPosition resumed = train.position();
  int64_t overall_step = resumed.epoch * static_cast<int64_t>(train.size()) +
                         static_cast<int64_t>(resumed.batches_yielded);

  for (int epoch = static_cast<int>(resumed.epoch); epoch < args.epochs; ++epoch) {
    model->train();
    mnist::EpochClock clock;
    double loss_sum = 0;
    int64_t losses = 0;
    for (auto& batch : train) {
      optimizer.zero_grad();
      auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
      accelerator.backward(loss);
      optimizer.step();
      clock.step();
      ++overall_step;
      if (extra.with_tracking) {
        loss_sum += loss.item<double>();
        ++losses;
      }
      if (extra.checkpoint_every_steps > 0 && overall_step % extra.checkpoint_every_steps == 0) {
        accelerator.save_state();
      }
    }
    scheduler.step();

    model->eval();
    torch::NoGradGuard no_grad;
    int64_t correct = 0, total = 0;
    for (auto& batch : test) {
      auto predictions = model->forward(batch.data).argmax(1);
      auto matches = accelerator.gather_for_metrics(predictions.eq(batch.target));
      correct += matches.sum().item<int64_t>();
      total += matches.numel();
    }
    accelerator.print(mnist::report(epoch, correct, total, clock));
    if (extra.with_tracking) {
      accelerator.log(
          {{"accuracy", 100.0 * static_cast<double>(correct) / static_cast<double>(total)},
           {"train_loss", losses > 0 ? loss_sum / static_cast<double>(losses) : 0.0},
           {"epoch", static_cast<int64_t>(epoch)}},
          overall_step);
    }
    if (extra.checkpoint_every_epoch) accelerator.save_state();
  }
  accelerator.end_training();
  accelerator.save_model(model, extra.output_dir + "/model");
  return 0;
} catch (const std::exception& error) {
  std::cerr << "mnist: error: " << error.what() << std::endl;
  return 1;
}
