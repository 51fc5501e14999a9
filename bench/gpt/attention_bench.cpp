// attention_bench: forward + backward time of accelerate::causal_attention's
// kernels on one GPT layer's shapes, on this LibTorch and CPU, in float and
// in bfloat16 (what bf16 autocast hands attention), to choose the kernel
// AttentionKernel::kAuto takes on CPU (docs/gpt-performance.md).
//
//   attention_bench [--batch 16] [--heads 6] [--tokens 256] [--head_dim 64] [--repeats 10]
//                   [--layout 1]
//
// --layout 1 (the default): q, k, v as GPT-2's attention hands them, strided
// views of one fused projection [batch, tokens, 3 x heads x head_dim] (split,
// then each [batch, tokens, heads, head_dim] transposed), and
// the incoming gradient the transposed view of a [batch, tokens, heads,
// head_dim] one; --layout 2: four contiguous [batch, heads, tokens, head_dim]
// tensors.
//
// Prints one line per dtype and kernel: the median ms of --repeats
// forward+backward passes after two warm-up passes, and the ratio to the
// explicit kernel. On a CPU where the explicit kernel's float products are
// the library's own (src/nn/small_gemm.h), one more float line runs it on
// LibTorch's products (OpenBLAS on Debian's build) for comparison.
#include <accelerate/nn/attention.h>
#include <torch/torch.h>

#include "nn/blocked_causal_attention.h"
#include "nn/small_gemm.h"
#include "support/median_ms.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

double median_ms(const accelerate::AttentionKernel kernel, const std::vector<torch::Tensor>& qkv,
                 const torch::Tensor& grad, int repeats) {
  const auto options = accelerate::AttentionOptions().kernel(kernel);
  return bench::median_ms(
      [&] {
        auto out = accelerate::causal_attention(qkv[0], qkv[1], qkv[2], options);
        out.backward(grad);
      },
      repeats);
}

// The explicit kernel's blocks (64 queries, as kAuto's) on LibTorch's products.
double libtorch_products_ms(const std::vector<torch::Tensor>& qkv, const torch::Tensor& grad,
                            int repeats) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(qkv[0].size(3)));
  return bench::median_ms(
      [&] {
        auto out = accelerate::detail::blocked_causal_attention(
            qkv[0], qkv[1], qkv[2], scale, 64, accelerate::detail::BlockProducts::kLibTorch);
        out.backward(grad);
      },
      repeats);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 16, heads = 6, tokens = 256, head_dim = 64;
  int repeats = 10;
  bool projection_layout = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (value < 1) {
      std::fprintf(stderr, "attention_bench: error: %s must be a positive integer\n", argv[i]);
      return 2;
    }
    if (flag == "--batch")
      batch = value;
    else if (flag == "--heads")
      heads = value;
    else if (flag == "--tokens")
      tokens = value;
    else if (flag == "--head_dim")
      head_dim = value;
    else if (flag == "--repeats")
      repeats = static_cast<int>(value);
    else if (flag == "--layout" && value <= 2)
      projection_layout = value == 1;
    else {
      std::fprintf(stderr, "attention_bench: error: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  std::printf("causal attention [%lld, %lld, %lld, %lld], %s, %d threads, fused kernel %s\n",
              static_cast<long long>(batch), static_cast<long long>(heads),
              static_cast<long long>(tokens), static_cast<long long>(head_dim),
              projection_layout ? "views of one projection" : "contiguous",
              torch::get_num_threads(),
              accelerate::fused_attention_available() ? "available" : "absent");
  torch::manual_seed(0);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    std::vector<torch::Tensor> qkv;
    torch::Tensor grad;
    if (projection_layout) {
      const auto projection =
          torch::randn({batch, tokens, 3 * heads * head_dim}).to(dtype).requires_grad_();
      for (const auto& part : projection.split(heads * head_dim, /*dim=*/2)) {
        qkv.push_back(part.view({batch, tokens, heads, head_dim}).transpose(1, 2));
      }
      grad = torch::randn({batch, tokens, heads, head_dim}).to(dtype).transpose(1, 2);
    } else {
      for (int i = 0; i < 3; ++i) {
        qkv.push_back(torch::randn({batch, heads, tokens, head_dim}).to(dtype).requires_grad_());
      }
      grad = torch::randn({batch, heads, tokens, head_dim}).to(dtype);
    }
    const double plain = median_ms(accelerate::AttentionKernel::kExplicit, qkv, grad, repeats);
    std::printf("  %-8s explicit %8.2f ms\n", dtype == torch::kFloat ? "float" : "bfloat16", plain);
    if (dtype == torch::kFloat && accelerate::detail::small_gemm_preferred()) {
      const double libtorch = libtorch_products_ms(qkv, grad, repeats);
      std::printf("  float    explicit on LibTorch's products %8.2f ms  (%.2fx)\n", libtorch,
                  libtorch / plain);
    }
    if (accelerate::fused_attention_available()) {
      const double fused = median_ms(accelerate::AttentionKernel::kFused, qkv, grad, repeats);
      std::printf("  %-8s fused    %8.2f ms  (%.2fx the explicit kernel's time)\n",
                  dtype == torch::kFloat ? "float" : "bfloat16", fused, fused / plain);
    }
  }
  return 0;
}
