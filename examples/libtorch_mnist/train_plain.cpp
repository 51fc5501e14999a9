// MNIST written the way LibTorch's own examples write it: a dataset with
// .map(Normalize).map(Stack) and torch::data::make_data_loader, on one
// process. train.cpp is the same program accelerated:
// `diff train_plain.cpp train.cpp` is the four steps.
#include <torch/torch.h>

#include "../mnist/mnist_common.h"
#include "digits.h"

int main(int argc, char** argv) try {
  const auto args = mnist::parse_args(argc, argv);
  mnist::BasicNet model;
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(args.lr));
  auto train_set = libtorch_mnist::Digits(args.data_dir, /*train=*/true)
                       .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                       .map(torch::data::transforms::Stack<>());
  auto train = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      std::move(train_set),
      torch::data::DataLoaderOptions().batch_size(args.batch_size).workers(2));
  auto test_set = libtorch_mnist::Digits(args.data_dir, /*train=*/false)
                      .map(torch::data::transforms::Normalize<>(0.1307, 0.3081))
                      .map(torch::data::transforms::Stack<>());
  auto test = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(test_set), torch::data::DataLoaderOptions().batch_size(1000));

  for (int epoch = 0; epoch < args.epochs; ++epoch) {
    model->train();
    mnist::EpochClock clock;
    for (auto& batch : *train) {
      optimizer.zero_grad();
      auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
      clock.step();
    }

    model->eval();
    torch::NoGradGuard no_grad;
    int64_t correct = 0, total = 0;
    for (auto& batch : *test) {
      auto predictions = model->forward(batch.data).argmax(1);
      auto matches = predictions.eq(batch.target);
      correct += matches.sum().item<int64_t>();
      total += matches.numel();
    }
    std::cout << mnist::report(epoch, correct, total, clock) << std::endl;
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "libtorch_mnist: error: " << error.what() << std::endl;
  return 1;
}
