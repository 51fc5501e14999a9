// Our Llama against transformers' LlamaForCausalLM (bench/models/llama_twin.py),
// driven by bench/models/run_llama_bench.sh (docs/models.md, "Speed"):
//
//   llama_bench step CONFIG_JSON BATCH TOKENS STEPS WARMUP
//       forward + causal-LM loss + backward on random ids, random weights;
//       prints "result side=cpp tokens_per_s=..." over the steps after WARMUP.
//       Under `accelerate launch` (2 processes) the model is prepared by the
//       Accelerator (gradients averaged as DDP does) and tokens/s counts
//       every process's tokens.
//       LLAMA_TRACE=FILE: LibTorch's profiler trace of the first timed step
//       (Chrome trace JSON, the main process; bench/gpt/trace_summary.py
//       compares it with the twin's LLAMA_TRACE).
//   llama_bench load FOLDER
//       LlamaForCausalLM::from_pretrained(FOLDER): seconds, and how far the
//       resident memory rose above what it was before (peak, VmHWM).
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <cstdlib>
#include <memory>

#include <chrono>
#include <fstream>
#include <iostream>
#include <string>

#include "accelerate/accelerate.h"
#include "accelerate/models/llama.h"

namespace {

using Clock = std::chrono::steady_clock;

// A /proc/self/status field in bytes (VmRSS, VmHWM).
int64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kilobytes = 0;
  std::string unit;
  while (status >> key) {
    if (key == field + ":") {
      status >> kilobytes >> unit;
      return kilobytes * 1024;
    }
    std::getline(status, unit);
  }
  return -1;
}

// Zeroes VmHWM's high-water mark so that it counts from here (Linux 4.0+).
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

int run_steps(const std::string& config_path, int64_t batch, int64_t tokens, int steps,
              int warmup) {
  accelerate::Accelerator accelerator;
  const accelerate::models::LlamaConfig config = accelerate::models::read_llama_config(config_path);
  torch::manual_seed(0);
  accelerate::models::LlamaForCausalLM model(config);
  accelerator.prepare(model);
  const at::Tensor ids = torch::randint(config.vocab_size, {batch, tokens}, torch::kLong);
  const char* trace_file = std::getenv("LLAMA_TRACE");
  std::unique_ptr<torch::autograd::profiler::RecordProfile> trace;
  Clock::time_point start;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) start = Clock::now();
    const bool traced = step == warmup && trace_file && accelerator.is_main_process();
    if (traced) trace = std::make_unique<torch::autograd::profiler::RecordProfile>(trace_file);
    model->zero_grad();
    at::Tensor loss = model->loss(ids, ids);
    accelerator.backward(loss);
    trace.reset();  // (a traced run's tokens/s includes writing the trace)
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double all_tokens =
      static_cast<double>(batch * tokens) * steps * accelerator.num_processes();
  if (accelerator.is_main_process()) {
    std::cout << "result side=cpp processes=" << accelerator.num_processes()
              << " tokens_per_s=" << all_tokens / seconds << "\n";
  }
  return 0;
}

int run_load(const std::string& folder) {
  const int64_t before = status_bytes("VmRSS");
  reset_peak();
  const auto start = Clock::now();
  auto model = accelerate::models::LlamaForCausalLMImpl::from_pretrained(folder);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  int64_t parameter_bytes = 0;
  for (const at::Tensor& p : model->parameters()) parameter_bytes += p.nbytes();
  std::cout << "result side=cpp load_s=" << seconds
            << " peak_rise_bytes=" << status_bytes("VmHWM") - before
            << " parameter_bytes=" << parameter_bytes << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "step" && argc == 7) {
      return run_steps(argv[2], std::stoll(argv[3]), std::stoll(argv[4]), std::stoi(argv[5]),
                       std::stoi(argv[6]));
    }
    if (mode == "load" && argc == 3) return run_load(argv[2]);
    std::cerr << "usage: llama_bench step CONFIG_JSON BATCH TOKENS STEPS WARMUP | load FOLDER\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "llama_bench: " << error.what() << "\n";
    return 1;
  }
}
