// llama_kernels_bench: forward + backward time of the library's fused RMS
// norm, SiLU gate and rotary embedding (accelerate::rms_norm, silu_mul,
// rotary_embedding) against the LibTorch composites transformers'
// LlamaRMSNorm, LlamaMLP and apply_rotary_pos_emb compute,
// side by side in one process, on one Llama layer's shapes (the speed
// preset of bench/models/run_llama_bench.sh by default), in float and
// bfloat16 (docs/models.md, "Speed"); and the two element kernels of GPT-2
// and of every model's loss, the tanh GELU on the MLP's activations and the
// cross-entropy on [rows, --vocab] logits, against LibTorch's gelu(x,
// "tanh") and cross_entropy of the float logits. Run it under each
// ACCELERATE_CPU_CAPABILITY to time each copy of the kernels
// (docs/kernels.md, "Every path on every machine").
//
//   llama_kernels_bench [--batch 4] [--tokens 256] [--hidden 512] [--heads 8]
//                       [--intermediate 1376] [--vocab 8192] [--repeats 20]
//
// Prints one line per op and dtype: the median ms of --repeats passes after
// two warm-up passes, each side, and composite / fused (> 1: fused faster).
#include <accelerate/common/cpu_capability.h>
#include <accelerate/common/malloc_tuning.h>
#include <accelerate/nn/activations.h>
#include <accelerate/nn/cross_entropy.h>
#include <accelerate/nn/rms_norm.h>
#include <accelerate/nn/rotary_embedding.h>
#include <torch/torch.h>

#include "support/median_ms.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

using Op = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;

double median_ms(const Op& op, const torch::Tensor& a, const torch::Tensor& b,
                 const torch::Tensor& grad, int repeats) {
  return bench::median_ms(
      [&] {
        const auto la = a.detach().requires_grad_(), lb = b.detach().requires_grad_();
        op(la, lb).backward(grad);
      },
      repeats);
}

// apply_rotary_pos_emb on [batch, tokens, heads, d], cos/sin [tokens, d].
torch::Tensor composite_rotary(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const auto rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

torch::Tensor composite_rms_norm(const torch::Tensor& x, const torch::Tensor& w) {
  const auto x32 = x.to(torch::kFloat);
  return w * (x32 * torch::rsqrt(x32.pow(2).mean(-1, true) + 1e-6)).to(x.scalar_type());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 4, tokens = 256, hidden = 512, heads = 8, intermediate = 1376, vocab = 8192;
  int repeats = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (value < 1) {
      std::fprintf(stderr, "llama_kernels_bench: error: %s must be a positive integer\n", argv[i]);
      return 2;
    }
    if (flag == "--batch") {
      batch = value;
    } else if (flag == "--tokens") {
      tokens = value;
    } else if (flag == "--heads") {
      heads = value;
    } else if (flag == "--hidden") {
      hidden = value;
    } else if (flag == "--intermediate") {
      intermediate = value;
    } else if (flag == "--vocab") {
      vocab = value;
    } else if (flag == "--repeats") {
      repeats = static_cast<int>(value);
    } else {
      std::fprintf(stderr, "llama_kernels_bench: error: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  // As in training under the Accelerator: freed activation-sized blocks are
  // reused, not unmapped and faulted in again (both sides alike).
  accelerate::tune_malloc_for_training();
  const int64_t rows = batch * tokens, head_dim = hidden / heads;
  if (hidden % heads != 0 || head_dim % 2 != 0) {
    std::fprintf(stderr,
                 "llama_kernels_bench: error: --hidden must be --heads x an even head_dim\n");
    return 2;
  }
  std::printf(
      "kernels %s, %d threads, %lld x %lld tokens, hidden %lld, %lld heads, intermediate %lld, "
      "vocab %lld, median of %d\n",
      accelerate::to_string(accelerate::kernel_capability()), torch::get_num_threads(),
      static_cast<long long>(batch), static_cast<long long>(tokens), static_cast<long long>(hidden),
      static_cast<long long>(heads), static_cast<long long>(intermediate),
      static_cast<long long>(vocab), repeats);
  std::printf("%-10s %-9s %14s %14s %9s\n", "op", "dtype", "composite ms", "fused ms", "ratio");
  torch::manual_seed(0);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const std::string name = dtype == torch::kFloat ? "float" : "bfloat16";
    const auto x = torch::randn({rows, hidden}).to(dtype);
    const auto w = (1 + 0.1 * torch::randn({hidden})).to(dtype);
    const auto gx = torch::randn({rows, hidden}).to(dtype);
    const double norm_composite = median_ms(composite_rms_norm, x, w, gx, repeats);
    const double norm_fused =
        median_ms([](const torch::Tensor& a,
                     const torch::Tensor& b) { return accelerate::rms_norm(a, b, 1e-6); },
                  x, w, gx, repeats);
    std::printf("%-10s %-9s %14.3f %14.3f %9.2f\n", "rms_norm", name.c_str(), norm_composite,
                norm_fused, norm_composite / norm_fused);
    const auto gate = torch::randn({rows, intermediate}).to(dtype);
    const auto up = torch::randn({rows, intermediate}).to(dtype);
    const auto gm = torch::randn({rows, intermediate}).to(dtype);
    const double gate_composite =
        median_ms([](const torch::Tensor& a, const torch::Tensor& b) { return torch::silu(a) * b; },
                  gate, up, gm, repeats);
    const double gate_fused = median_ms(
        [](const torch::Tensor& a, const torch::Tensor& b) { return accelerate::silu_mul(a, b); },
        gate, up, gm, repeats);
    std::printf("%-10s %-9s %14.3f %14.3f %9.2f\n", "silu_mul", name.c_str(), gate_composite,
                gate_fused, gate_composite / gate_fused);
    // The query's rotation ([batch, tokens, heads, head_dim]); cos and sin
    // do not need gradients, so the second input is unused by both.
    const auto angles = torch::rand({tokens, head_dim}) * 6;
    const auto cos = angles.cos().to(dtype), sin = angles.sin().to(dtype);
    const auto q = torch::randn({batch, tokens, heads, head_dim}).to(dtype);
    const auto gq = torch::randn({batch, tokens, heads, head_dim}).to(dtype);
    const auto unused = torch::zeros({1}, dtype);
    const double rotary_composite =
        median_ms([&](const torch::Tensor& a,
                      const torch::Tensor& b) { return composite_rotary(a, cos, sin) + b; },
                  q, unused, gq, repeats);
    const double rotary_fused = median_ms(
        [&](const torch::Tensor& a, const torch::Tensor& b) {
          return accelerate::rotary_embedding(a, cos, sin) + b;
        },
        q, unused, gq, repeats);
    std::printf("%-10s %-9s %14.3f %14.3f %9.2f\n", "rotary", name.c_str(), rotary_composite,
                rotary_fused, rotary_composite / rotary_fused);
    const double gelu_composite = median_ms(
        [](const torch::Tensor& a, const torch::Tensor& b) { return torch::gelu(a, "tanh") + b; },
        gate, unused, gm, repeats);
    const double gelu_fused = median_ms(
        [](const torch::Tensor& a, const torch::Tensor& b) {
          return accelerate::gelu(a, accelerate::GeluApproximation::kTanh) + b;
        },
        gate, unused, gm, repeats);
    std::printf("%-10s %-9s %14.3f %14.3f %9.2f\n", "gelu_tanh", name.c_str(), gelu_composite,
                gelu_fused, gelu_composite / gelu_fused);
    // The loss of [rows, vocab] logits: LibTorch's on their float copy (what
    // a model computes under autocast), the library's on them as they are.
    const auto logits = torch::randn({rows, vocab}).to(dtype);
    const auto targets = torch::randint(vocab, {rows}, torch::kLong);
    const auto no_grad = torch::ones({}, torch::kFloat);
    const double loss_composite = median_ms(
        [&](const torch::Tensor& a, const torch::Tensor&) {
          return torch::nn::functional::cross_entropy(a.to(torch::kFloat), targets);
        },
        logits, unused, no_grad, repeats);
    const double loss_fused =
        median_ms([&](const torch::Tensor& a,
                      const torch::Tensor&) { return accelerate::cross_entropy(a, targets); },
                  logits, unused, no_grad, repeats);
    std::printf("%-10s %-9s %14.3f %14.3f %9.2f\n", "cross_ent", name.c_str(), loss_composite,
                loss_fused, loss_composite / loss_fused);
  }
  return 0;
}
