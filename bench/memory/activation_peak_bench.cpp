// Activation memory of the GPT example, measured the way
// `accelerate estimate-memory` models it (docs/cli.md, "Activations"): one
// process, fp32, the preset with its context set to --seq_len.
//
//   gpt_activation_peak_bench [--preset small] [--vocab 4096] [--seq_len 256]
//                             [--batch 1] [--steps 2] [--checkpointing off|on|both]
//                             [--mixed_precision no|bf16]
//
// Every CPU tensor allocation goes through a counting allocator
// (src/compat/memory_compat.h), so the figures are live tensor bytes, not
// what malloc keeps. The gradients already exist when a measured step
// starts (a warm-up step made them, and zero_grad zeroes them in place), so
// what the count rises by within the step is activations, their gradients
// and temporaries, never model state:
//   held:  the rise when the forward pass returned (what backward needs),
//   peak:  the most the count rose above the step's start, in the forward
//          pass and in the backward pass.
// One line per run, "key value" pairs for scripts (bench/memory/run_estimate_bench.sh).
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "accelerate/precision/autocast.h"
#include "compat/memory_compat.h"
#include "presets.h"

namespace {

struct ActivationFigures {
  double held = 0;
  double forward_peak = 0;
  double backward_peak = 0;
};

ActivationFigures measure_activations(const std::string& preset, int64_t vocab, int64_t seq_len,
                                      int64_t batch, int steps, bool checkpointing, bool bf16) {
  namespace compat = accelerate::compat;
  auto config = gpt::preset_config(preset, vocab);
  config.n_positions = seq_len;
  torch::manual_seed(0);
  gpt::Gpt model(config);
  model->transformer->set_gradient_checkpointing(checkpointing);
  model->train();
  const auto tokens = torch::randint(config.vocab_size, {batch, seq_len});
  const auto targets = tokens.roll(-1, 1);
  // bf16: the forward pass under CPU autocast (fp32 weights), as
  // Accelerator's mixed_precision "bf16" runs it; backward outside it.
  const auto loss_of = [&] {
    std::optional<accelerate::AutocastGuard> autocast;
    if (bf16) autocast.emplace(torch::kCPU, torch::kBFloat16);
    return model->loss_on_shifted_labels(tokens, targets);
  };
  // The warm-up step creates every .grad; later steps accumulate into them.
  loss_of().backward();
  ActivationFigures most;
  for (int step = 0; step < steps; ++step) {
    for (auto& p : model->parameters()) p.mutable_grad().zero_();
    const double start = static_cast<double>(compat::cpu_live_bytes());
    compat::reset_cpu_peak_bytes();
    auto loss = loss_of();
    const double held = static_cast<double>(compat::cpu_live_bytes()) - start;
    const double forward_peak = static_cast<double>(compat::cpu_peak_bytes()) - start;
    compat::reset_cpu_peak_bytes();
    loss.backward();
    loss = torch::Tensor();
    const double backward_peak = static_cast<double>(compat::cpu_peak_bytes()) - start;
    most.held = std::max(most.held, held);
    most.forward_peak = std::max(most.forward_peak, forward_peak);
    most.backward_peak = std::max(most.backward_peak, backward_peak);
  }
  return most;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "small", checkpointing = "both", precision = "no";
  int64_t vocab = 4096, seq_len = 256, batch = 1;
  int steps = 2;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gpt_activation_peak_bench: %s needs a value\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (flag == "--preset") {
      preset = value;
    } else if (flag == "--vocab") {
      vocab = std::stoll(value);
    } else if (flag == "--seq_len") {
      seq_len = std::stoll(value);
    } else if (flag == "--batch") {
      batch = std::stoll(value);
    } else if (flag == "--steps") {
      steps = std::stoi(value);
    } else if (flag == "--checkpointing" && (value == "on" || value == "off" || value == "both")) {
      checkpointing = value;
    } else if (flag == "--mixed_precision" && (value == "no" || value == "bf16")) {
      precision = value;
    } else {
      std::fprintf(stderr, "gpt_activation_peak_bench: bad flag %s %s\n", flag.c_str(),
                   value.c_str());
      return 2;
    }
  }
  torch::set_num_threads(std::max(1, torch::get_num_threads()));
  accelerate::compat::install_cpu_allocation_counter();
  for (const bool on : {false, true}) {
    if ((on && checkpointing == "off") || (!on && checkpointing == "on")) continue;
    const ActivationFigures f =
        measure_activations(preset, vocab, seq_len, batch, steps, on, precision == "bf16");
    std::printf(
        "preset %s vocab %lld seq_len %lld batch %lld mixed_precision %s checkpointing %s held "
        "%.0f "
        "forward_peak %.0f backward_peak %.0f peak %.0f\n",
        preset.c_str(), static_cast<long long>(vocab), static_cast<long long>(seq_len),
        static_cast<long long>(batch), precision.c_str(), on ? "on" : "off", f.held, f.forward_peak,
        f.backward_peak, std::max(f.forward_peak, f.backward_peak));
    std::fflush(stdout);
  }
  return 0;
}
