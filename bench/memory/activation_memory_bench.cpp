// Activation checkpointing on the GPT example's presets: the bytes the
// autograd graph holds after forward (the activations backward needs), and
// the time of a training step, with and without checkpointing, side by side.
//
//   activation_memory_bench [--preset tiny|small] [--batch 8] [--steps 3]
//
// Bytes are what glibc's malloc reports as allocated (mallinfo2), measured
// right before forward and right after it; LibTorch's CPU tensors come from
// malloc, so the difference is what forward left alive for backward.
#include <malloc.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "presets.h"

namespace {

size_t allocated_bytes() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

struct Measured {
  double held_mb = 0;  // allocated after forward minus before
  double step_ms = 0;  // forward + backward, median of the steps
};

Measured measure(const std::string& preset, int64_t batch, int steps, bool checkpointing) {
  const auto config = gpt::preset_config(preset, 8192);
  torch::manual_seed(0);
  gpt::Gpt model(config);
  model->transformer->set_gradient_checkpointing(checkpointing);
  model->train();
  auto tokens = torch::randint(config.vocab_size, {batch, config.n_positions});
  auto targets = tokens.roll(-1, 1);
  Measured result;
  std::vector<double> times;
  for (int step = 0; step < steps + 1; ++step) {  // the first step warms up
    model->zero_grad(/*set_to_none=*/true);
    const size_t before = allocated_bytes();
    const auto started = std::chrono::steady_clock::now();
    auto loss = model->loss_on_shifted_labels(tokens, targets);
    const size_t after = allocated_bytes();
    loss.backward();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    if (step == 0) continue;
    result.held_mb = static_cast<double>(after - before) / 1e6;
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  result.step_ms = times[times.size() / 2];
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "tiny";
  int64_t batch = 8;
  int steps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--preset"))
      preset = argv[i + 1];
    else if (!std::strcmp(argv[i], "--batch"))
      batch = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps"))
      steps = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "activation_memory_bench: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  const Measured plain = measure(preset, batch, steps, false);
  const Measured checkpointed = measure(preset, batch, steps, true);
  std::printf("preset %s, batch %lld, threads %d\n", preset.c_str(), static_cast<long long>(batch),
              torch::get_num_threads());
  std::printf("%-22s %14s %12s\n", "", "held after fwd", "step");
  std::printf("%-22s %11.1f MB %9.1f ms\n", "plain", plain.held_mb, plain.step_ms);
  std::printf("%-22s %11.1f MB %9.1f ms\n", "checkpointed blocks", checkpointed.held_mb,
              checkpointed.step_ms);
  std::printf("%-22s %13.2fx %11.2fx\n", "checkpointed / plain",
              checkpointed.held_mb / plain.held_mb, checkpointed.step_ms / plain.step_ms);
  return 0;
}
