// What the plain and the accelerated MNIST programs share: the seed
// documents' BasicNet, command-line flags (examples/common/example_flags.h),
// and the per-epoch report, so that the two programs differ only in the lines
// accelerate-cpp changes.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/torch.h>

#include "../common/example_flags.h"

namespace mnist {

// Conv2d 1→32→64 (3×3), max-pool, dropout 0.25, Linear 9216→128, dropout
// 0.5, Linear 128→10, log-softmax.
struct BasicNetImpl : torch::nn::Module {
  BasicNetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)))),
        dropout1(register_module("dropout1", torch::nn::Dropout(0.25))),
        dropout2(register_module("dropout2", torch::nn::Dropout(0.5))),
        fc1(register_module("fc1", torch::nn::Linear(9216, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1(x));
    x = torch::relu(conv2(x));
    x = dropout1(torch::max_pool2d(x, 2)).flatten(1);
    x = dropout2(torch::relu(fc1(x)));
    return torch::log_softmax(fc2(x), 1);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Dropout dropout1, dropout2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(BasicNet);

struct Args {
  std::string data_dir = "data/mnist";
  int epochs = 3;
  size_t batch_size = 64;
  double lr = 1e-3;
  uint64_t seed = 42;
};

inline const char* const kAbout =
    "Trains the seed's BasicNet on MNIST and prints each epoch's test accuracy and ms/step.";

// The flags every MNIST program takes; a program may add its own after them
// (train_complete.cpp).
inline void add_flags(examples::Flags& flags, Args& args) {
  flags.add("data_dir", &args.data_dir, "the MNIST IDX files, from scripts/fetch-mnist.sh", "DIR")
      .add("epochs", &args.epochs, "epochs to train")
      .add("batch_size", &args.batch_size, "training batch size (per process)")
      .add("lr", &args.lr, "AdamW's learning rate")
      .add("seed", &args.seed, "the random seed");
}

// What every MNIST program does with its parsed flags: the same intra-op
// threads as the launcher's share (Debian's LibTorch would otherwise use one
// thread), and the seed.
inline void set_up(const Args& args) {
  if (const char* threads = std::getenv("OMP_NUM_THREADS"))
    torch::set_num_threads(std::atoi(threads));
  torch::manual_seed(args.seed);
}

// The four IDX files must be in --data_dir. Its default is relative to the
// folder the program runs in, so the error names the flag and the script
// (one line, exit code 2, as a bad flag).
inline void check_data_dir(const examples::Flags& flags, const Args& args) {
  flags.require_data("--data_dir", args.data_dir,
                     {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                      "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"},
                     "run scripts/fetch-mnist.sh in the project's folder, or give --data_dir the "
                     "folder that holds MNIST");
}

// The shared flags from the command line (--help: the usage; a bad flag or
// a --data_dir without MNIST: one line and exit code 2), then set_up().
inline Args parse_args(int argc, char** argv) {
  Args args;
  examples::Flags flags(kAbout);
  add_flags(flags, args);
  flags.parse(argc, argv);
  check_data_dir(flags, args);
  set_up(args);
  return args;
}

// Times the training steps of one epoch (not the evaluation after it: the
// clock stops at the last step, as bench/python/mnist_reference.py's does).
class EpochClock {
 public:
  // `skipped`: the step's optimizer update was skipped (fp16 loss scaling
  // found inf/NaN gradients), which the report counts.
  void step(bool skipped = false) {
    ++steps_;
    if (skipped) ++skipped_;
    last_step_ = std::chrono::steady_clock::now();
  }
  int64_t skipped_steps() const { return skipped_; }
  double ms_per_step() const {
    auto elapsed = last_step_ - start_;
    return std::chrono::duration<double, std::milli>(elapsed).count() /
           std::max<int64_t>(1, steps_);
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_step_ = start_;
  int64_t steps_ = 0;
  int64_t skipped_ = 0;
};

// The epoch's report line, which the programs print (the accelerated ones on
// the main process only, through accelerator.print). Epochs count from 0,
// as in Accelerate's examples.
[[nodiscard]] inline std::string report(int epoch, int64_t correct, int64_t total,
                                        const EpochClock& clock) {
  char line[160];
  std::snprintf(line, sizeof(line), "epoch %d: test accuracy %.2f%% (%lld/%lld), %.1f ms/step",
                epoch, 100.0 * static_cast<double>(correct) / static_cast<double>(total),
                static_cast<long long>(correct), static_cast<long long>(total),
                clock.ms_per_step());
  std::string text = line;
  if (clock.skipped_steps() > 0)
    text += ", " + std::to_string(clock.skipped_steps()) + " skipped steps";
  return text;
}

}  // namespace mnist
