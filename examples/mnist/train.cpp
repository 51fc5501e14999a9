// The seed's MNIST recipe, accelerated: the same program trains on one
// process or many (accelerate launch --cpu --num_processes 2 ./mnist).
// Compare with train_plain.cpp: `diff train_plain.cpp train.cpp`.
#include <torch/torch.h>

#include <accelerate/accelerate.h>
#include <accelerate/data/mnist.h>

#include "mnist_common.h"

int main(int argc, char** argv) try {
  const auto args = mnist::parse_args(argc, argv);
  accelerate::Accelerator accelerator;
  mnist::BasicNet model;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(args.lr));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/30, /*gamma=*/0.1);
  accelerate::DataLoader train(
      accelerate::MnistDataset(args.data_dir, accelerate::MnistSplit::kTrain),
      accelerate::DataLoaderOptions(args.batch_size).shuffle(true));
  accelerate::DataLoader test(
      accelerate::MnistDataset(args.data_dir, accelerate::MnistSplit::kTest),
      accelerate::DataLoaderOptions(1000));
  accelerator.prepare(model, optimizer, train, test);

  for (int epoch = 0; epoch < args.epochs; ++epoch) {
    model->train();
    mnist::EpochClock clock;
    accelerate::ProgressBar bar(accelerate::ProgressBarOptions()
                                    .total(static_cast<int64_t>(train.size()))
                                    .desc("epoch " + std::to_string(epoch))
                                    .leave(false));
    for (auto& batch : train) {
      optimizer.zero_grad();
      auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
      accelerator.backward(loss);
      optimizer.step();
      clock.step(accelerator.optimizer_step_was_skipped());
      bar.update();
    }
    bar.close();
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
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "mnist: error: " << error.what() << std::endl;
  return 1;
}
