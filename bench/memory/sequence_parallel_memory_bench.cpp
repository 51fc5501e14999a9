// Per-rank activation memory of the GPT example's block stack with
// sequence parallelism (DeepSpeed Ulysses), one sequence of --seq_len
// tokens, fp32, no dropout. An accelerate program: the sequence-parallel
// size comes from the launch (bench/memory/run_sequence_parallel_bench.sh):
//
//   accelerate launch --cpu --num_processes 2 --use_parallelism_config \
//       --parallelism_config_sp_size 2 sequence_parallel_memory_bench --seq_len 4096
//
// Every CPU tensor allocation of each process goes through the counting
// allocator (src/compat/memory_compat.h) the ZeRO and activation benches
// use. A warm-up step makes every .grad first, so what the live count rises
// by within the measured step is activations, their gradients and
// temporaries (the all-to-alls' buffers included), never model state:
//   held:  the rise when the loss returned (what backward needs),
//   peak:  the most the count rose above the step's start (forward or
//          backward).
// The main process prints the largest of the ranks' figures, one line of
// "key value" pairs.
#include <torch/torch.h>

#include <accelerate/accelerate.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>

#include "compat/memory_compat.h"
#include "presets.h"

int main(int argc, char** argv) {
  namespace compat = accelerate::compat;
  compat::install_cpu_allocation_counter();
  std::string preset = "tiny";
  int64_t seq_len = 1024, vocab = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--seq_len") {
      seq_len = std::stoll(value);
    } else if (flag == "--preset") {
      preset = value;
    } else if (flag == "--vocab") {
      vocab = std::stoll(value);
    } else {
      std::fprintf(stderr, "sequence_parallel_memory_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  accelerate::Accelerator accelerator;
  const accelerate::SequenceParallel& sp = accelerator.sequence_parallel();
  auto config = gpt::preset_config(preset, vocab, /*dropout=*/0.0);
  config.n_positions = seq_len;
  torch::manual_seed(0);  // the same weights and tokens on every rank
  gpt::Gpt model(config);
  model->use_sequence_parallel(sp);
  model->train();
  const auto tokens = torch::randint(config.vocab_size, {1, seq_len});
  const auto targets = tokens.roll(-1, 1);
  model->loss_on_shifted_labels(tokens, targets).backward();  // warm-up: every .grad exists
  for (auto& p : model->parameters()) p.mutable_grad().zero_();
  const double start = static_cast<double>(compat::cpu_live_bytes());
  compat::reset_cpu_peak_bytes();
  auto loss = model->loss_on_shifted_labels(tokens, targets);
  const double held = static_cast<double>(compat::cpu_live_bytes()) - start;
  loss.backward();
  loss = torch::Tensor();
  const double peak = static_cast<double>(compat::cpu_peak_bytes()) - start;
  // Every rank's figures to every rank; the main process prints the largest.
  std::ostringstream mine;
  mine << held << " " << peak;
  double most_held = 0, most_peak = 0;
  for (const std::string& text : accelerator.communicator().all_gather_bytes(mine.str())) {
    std::istringstream in(text);
    double h = 0, p = 0;
    in >> h >> p;
    most_held = std::max(most_held, h);
    most_peak = std::max(most_peak, p);
  }
  if (accelerator.is_main_process()) {
    std::printf("preset %s seq_len %lld sp %d processes %d held %.0f peak %.0f\n", preset.c_str(),
                static_cast<long long>(seq_len), sp.size(), accelerator.num_processes(), most_held,
                most_peak);
    std::fflush(stdout);
  }
  return 0;
}
