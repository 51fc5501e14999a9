// accelerate::Trainer in one file: a small network learns y = sin(x) from
// 512 samples and is evaluated on 128 others after every epoch, on one
// process or many (accelerate launch --cpu --num_processes 2
// build/examples/trainer). The README shows this file whole.
#include <torch/torch.h>

#include <accelerate/accelerate.h>
#include <accelerate/trainer/trainer.h>  // the Trainer sits above the Accelerator

struct NetImpl : torch::nn::Module {
  NetImpl()
      : hidden(register_module("hidden", torch::nn::Linear(1, 32))),
        out(register_module("out", torch::nn::Linear(32, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return out(torch::tanh(hidden(x))); }
  torch::nn::Linear hidden, out;
};
TORCH_MODULE(Net);

// x uniform in [-3, 3), the target sin(x).
accelerate::TensorDataset sine(int64_t samples, uint64_t seed) {
  torch::Tensor x = torch::rand({samples, 1}, at::detail::createCPUGenerator(seed)) * 6 - 3;
  return accelerate::TensorDataset(x, torch::sin(x));
}

int main() {
  accelerate::set_seed(42);  // LibTorch seeds its generator anew each run: fix the first weights
  Net model;
  accelerate::Trainer<Net, accelerate::TensorDataset> trainer(
      model,
      accelerate::TrainingArguments()
          .output_dir("runs/sine")
          .per_device_train_batch_size(32)
          .learning_rate(1e-2)
          .num_train_epochs(20)
          .logging_steps(100)
          .eval_strategy(accelerate::IntervalStrategy::kEpoch)
          .save_strategy(accelerate::SaveStrategy::kNo),
      sine(512, 1),
      [](Net& net, const accelerate::Example& batch) {
        return torch::mse_loss(net->forward(batch.data), batch.target);
      },
      sine(128, 2));
  trainer.train();
  trainer.accelerator().print("final eval_loss ", trainer.evaluate().at("eval_loss"));
}
