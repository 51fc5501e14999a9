// train_plain.cpp accelerated: the four steps (include, Accelerator,
// accelerate::make_data_loader + prepare, accelerator.backward), exact
// metrics with gather_for_metrics, and the report printed once, on the main
// process (accelerator.print). Runs unchanged on one process or many:
//   accelerate launch --cpu --num_processes 2 build/examples/libtorch_mnist --data_dir data/mnist
#include <torch/torch.h>

#include <accelerate/accelerate.h>

#include "../mnist/mnist_common.h"
#include "digits.h"

int main(int argc, char** argv) try {
  const auto args = mnist::parse_args(argc, argv);
  accelerate::Accelerator accelerator;
  mnist::BasicNet model;
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(args.lr));
  auto train_set = libtorch_mnist::Digits(args.data_dir, /*train=*/true)
                       .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                       .map(torch::data::transforms::Stack<>());
  auto train = accelerate::make_data_loader<torch::data::samplers::RandomSampler>(
      std::move(train_set),
      torch::data::DataLoaderOptions().batch_size(args.batch_size).workers(2));
  auto test_set = libtorch_mnist::Digits(args.data_dir, /*train=*/false)
                      .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                      .map(torch::data::transforms::Stack<>());
  auto test = accelerate::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(test_set), torch::data::DataLoaderOptions().batch_size(1000));
  accelerator.prepare(model, optimizer, train, test);

  for (int epoch = 0; epoch < args.epochs; ++epoch) {
    model->train();
    mnist::EpochClock clock;
    for (auto& batch : *train) {
      optimizer.zero_grad();
      auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
      accelerator.backward(loss);
      optimizer.step();
      clock.step();
    }

    model->eval();
    torch::NoGradGuard no_grad;
    int64_t correct = 0, total = 0;
    for (auto& batch : *test) {
      auto predictions = model->forward(batch.data).argmax(1);
      auto matches = accelerator.gather_for_metrics(predictions.eq(batch.target));
      correct += matches.sum().item<int64_t>();
      total += matches.numel();
    }
    accelerator.print(mnist::report(epoch, correct, total, clock));
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "libtorch_mnist: error: " << error.what() << std::endl;
  return 1;
}
