// accelerate::causal_attention: the explicit kernel against a direct
// computation, the fused kernel (LibTorch 2.x) against the explicit one,
// causality, dropout, and errors for bad shapes.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "accelerate/common/cpu_capability.h"
#include "accelerate/common/errors.h"
#include "accelerate/nn/attention.h"
#include "accelerate/precision/autocast.h"
#include "compat/blas_threads.h"
#include "nn/blocked_causal_attention.h"
#include "nn/small_gemm.h"

namespace {

using accelerate::AttentionKernel;
using accelerate::AttentionOptions;

// softmax(q k^T / sqrt(d) with j > i masked) v, one query row at a time;
// window > 0: also j <= i - window masked.
torch::Tensor windowed_reference(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, int64_t window) {
  auto out = torch::zeros_like(q);
  const int64_t tokens = q.size(2);
  for (int64_t i = 0; i < tokens; ++i) {
    const int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
    auto scores = torch::matmul(q.slice(2, i, i + 1), k.slice(2, first, i + 1).transpose(-2, -1)) /
                  std::sqrt(static_cast<double>(q.size(3)));
    out.slice(2, i, i + 1).copy_(torch::matmul(scores.softmax(-1), v.slice(2, first, i + 1)));
  }
  return out;
}

torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return windowed_reference(q, k, v, 0);
}

TEST(CausalAttention, ExplicitKernelComputesMaskedSoftmaxAttention) {
  torch::manual_seed(0);
  auto q = torch::randn({2, 3, 7, 8}), k = torch::randn({2, 3, 7, 8}),
       v = torch::randn({2, 3, 7, 8});
  auto out =
      accelerate::causal_attention(q, k, v, AttentionOptions().kernel(AttentionKernel::kExplicit));
  EXPECT_TRUE(torch::allclose(out, reference(q, k, v), 1e-5, 1e-6));
}

// Value and the gradients of sum(out * g) in q, k, v.
std::vector<torch::Tensor> attention_and_grads(
    const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                                      const torch::Tensor&)>& attend,
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& g) {
  auto lq = q.detach().requires_grad_(), lk = k.detach().requires_grad_(),
       lv = v.detach().requires_grad_();
  auto out = attend(lq, lk, lv);
  auto grads = torch::autograd::grad({out}, {lq, lk, lv}, {g});
  return {out.detach(), grads[0], grads[1], grads[2]};
}

torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v) {
  return accelerate::causal_attention(q, k, v,
                                      AttentionOptions().kernel(AttentionKernel::kExplicit));
}

// On CPU the explicit kernel's scale-mask-softmax is the library's fused
// causal softmax, over blocks of 64 queries; its gradients must be the
// direct computation's, for row lengths that leave vector remainders (7,
// 33), one block (64), a second block of one query (65) and a short last
// block (150 = 64 + 64 + 22), with q, k, v the strided views of one fused
// projection that GPT-2's attention hands it.
TEST(CausalAttention, ExplicitKernelGradientsEqualTheDirectComputation) {
  torch::manual_seed(3);
  for (int64_t tokens : {1, 7, 33, 64, 65, 150}) {
    const auto heads = torch::randn({3, 2, tokens, 3, 16}).permute({0, 1, 3, 2, 4});
    auto q = heads[0], k = heads[1], v = heads[2], g = torch::randn({2, 3, tokens, 16});
    auto ours = attention_and_grads(explicit_attention, q, k, v, g);
    auto direct = attention_and_grads(reference, q, k, v, g);
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::allclose(ours[i], direct[i], 1e-5, 1e-5))
          << "tokens " << tokens << " tensor " << i << " max diff "
          << (ours[i] - direct[i]).abs().max().item<double>();
    }
  }
}

// bfloat16 q, k, v (what bf16 autocast hands attention): the softmax runs in
// float and rounds its output once, so the result is the float
// computation's to bfloat16 accuracy, and comes back in bfloat16.
TEST(CausalAttention, ExplicitKernelInBFloat16MatchesFloat) {
  torch::manual_seed(4);
  auto q = torch::randn({2, 3, 40, 16}), k = torch::randn({2, 3, 40, 16}),
       v = torch::randn({2, 3, 40, 16}), g = torch::randn({2, 3, 40, 16});
  auto bf = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  auto ours = attention_and_grads(explicit_attention, bf(q), bf(k), bf(v), bf(g));
  auto wide = attention_and_grads(reference, bf(q).to(torch::kFloat), bf(k).to(torch::kFloat),
                                  bf(v).to(torch::kFloat), bf(g).to(torch::kFloat));
  for (size_t i = 0; i < ours.size(); ++i) {
    ASSERT_EQ(ours[i].scalar_type(), torch::kBFloat16);
    const double scale = wide[i].abs().max().item<double>();
    EXPECT_LT((ours[i].to(torch::kFloat) - wide[i]).abs().max().item<double>(), 0.03 * scale)
        << "tensor " << i;
  }
}

// The blocked kernel itself for any block size (one query per block, a size
// that divides nothing, one block longer than the sequence), on one thread
// and on two, where the matrices split over the threads unevenly (3), on
// LibTorch's products and, where this CPU runs them, the library's own.
TEST(CausalAttention, BlockedKernelEqualsTheDirectComputationForAnyBlock) {
  using accelerate::detail::BlockProducts;
  torch::manual_seed(6);
  auto q = torch::randn({1, 3, 17, 8}), k = torch::randn({1, 3, 17, 8}),
       v = torch::randn({1, 3, 17, 8}), g = torch::randn({1, 3, 17, 8});
  auto direct = attention_and_grads(reference, q, k, v, g);
  std::vector<BlockProducts> products = {BlockProducts::kLibTorch};
  if (accelerate::detail::small_gemm_preferred()) products.push_back(BlockProducts::kSmallGemm);
  const int threads_before = at::get_num_threads();
  for (BlockProducts product : products) {
    for (int threads : {1, 2}) {
      at::set_num_threads(threads);
      for (int64_t block : {1, 5, 17, 40}) {
        auto blocked = attention_and_grads(
            [&](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
              return accelerate::detail::blocked_causal_attention(a, b, c, 1.0 / std::sqrt(8.0),
                                                                  block, product);
            },
            q, k, v, g);
        for (size_t i = 0; i < blocked.size(); ++i) {
          EXPECT_TRUE(torch::allclose(blocked[i], direct[i], 1e-5, 1e-5))
              << "products " << static_cast<int>(product) << ", " << threads << " threads, block "
              << block << " tensor " << i << " max diff "
              << (blocked[i] - direct[i]).abs().max().item<double>();
        }
      }
    }
  }
  at::set_num_threads(threads_before);
}

// The float form on the library's own products reads GPT-2's q, k, v (views
// of one fused projection) and the incoming gradient through their strides,
// and lays out the output and the gradients [batch, tokens, heads,
// head_dim], so that merging the heads back is a view; its values are the
// LibTorch products' (a gradient of stride 0, as sum() hands back, too).
TEST(CausalAttention, FloatFormReadsStridesAndWritesTokensMajor) {
  using accelerate::detail::BlockProducts;
  if (!accelerate::detail::small_gemm_preferred()) {
    GTEST_SKIP() << "this CPU has no AVX-512: the library's own products are not used";
  }
  torch::manual_seed(8);
  const auto projected = torch::randn({2, 70, 3, 4, 16});  // [batch, tokens, q/k/v, heads, dim]
  const auto heads = projected.permute({2, 0, 3, 1, 4});   // q/k/v x [batch, heads, tokens, dim]
  const auto g = torch::randn({2, 70, 4, 16}).transpose(1, 2);
  auto attend = [](BlockProducts product) {
    return [product](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& c) {
      return accelerate::detail::blocked_causal_attention(a, b, c, 0.25, 32, product);
    };
  };
  auto own =
      attention_and_grads(attend(BlockProducts::kSmallGemm), heads[0], heads[1], heads[2], g);
  auto blas =
      attention_and_grads(attend(BlockProducts::kLibTorch), heads[0], heads[1], heads[2], g);
  for (size_t i = 0; i < own.size(); ++i) {
    EXPECT_TRUE(own[i].transpose(1, 2).is_contiguous()) << "tensor " << i;
    EXPECT_TRUE(torch::allclose(own[i], blas[i], 1e-5, 1e-5))
        << "tensor " << i << " max diff " << (own[i] - blas[i]).abs().max().item<double>();
  }
  auto q = heads[0].detach().requires_grad_();
  attend(BlockProducts::kSmallGemm)(q, heads[1], heads[2]).sum().backward();
  auto q_blas = heads[0].detach().requires_grad_();
  attend(BlockProducts::kLibTorch)(q_blas, heads[1], heads[2]).sum().backward();
  EXPECT_TRUE(torch::allclose(q.grad(), q_blas.grad(), 1e-5, 1e-5));
  EXPECT_THROW(attend(BlockProducts::kSmallGemm)(heads[0].to(torch::kBFloat16),
                                                 heads[1].to(torch::kBFloat16),
                                                 heads[2].to(torch::kBFloat16)),
               accelerate::Error);
}

// The blocked kernel's threads run whole products with one-threaded
// OpenBLAS calls (Debian's LibTorch); OpenBLAS's own count is back after.
TEST(CausalAttention, OneThreadedBlasRestoresOpenblasThreads) {
  using GetThreads = int (*)();
  using SetThreads = void (*)(int);
  const auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  const auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (get == nullptr || set == nullptr) GTEST_SKIP() << "this LibTorch calls no OpenBLAS";
  const int before = get();
  set(2);
  {
    accelerate::compat::OneThreadedBlas one_threaded;
    EXPECT_EQ(get(), 1);
  }
  EXPECT_EQ(get(), 2);
  set(before);
}

// The float products of the library's own run only where the kernels'
// capability is avx512 (the capped CTest legs run the rest of this file
// without them, on LibTorch's products, as an AVX2 CPU does).
TEST(CausalAttention, OwnFloatProductsFollowTheKernelCapability) {
#if defined(__x86_64__)
  EXPECT_EQ(accelerate::detail::small_gemm_preferred(),
            accelerate::kernel_capability() == accelerate::CpuCapability::kAvx512);
#else
  EXPECT_FALSE(accelerate::detail::small_gemm_preferred());
#endif
}

// The same attention as a LibTorch program writes it: whole-matrix
// products, the mask, softmax (under autocast: products in bfloat16, each
// as deep as the blocked kernel's).
torch::Tensor whole_matrix_reference(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v) {
  const int64_t tokens = q.size(2);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  auto future = torch::ones({tokens, tokens}, torch::kBool).triu(1);
  return torch::matmul(scores.masked_fill(future, -INFINITY).softmax(-1), v);
}

// float q, k, v under CPU bf16 autocast: the products run in bfloat16 as
// LibTorch's matmul would run them there, the output is bfloat16, and the
// gradients come back in the inputs' float. How close to float that is
// depends on the CPU: with AVX-512 LibTorch's bf16 products go through
// oneDNN, which accumulates in float; without it (an AVX2 EPYC, or the
// capped CTest legs) LibTorch 1.13 uses its own gemm, which rounds the sum
// to bfloat16 at every step. Measured on LibTorch 1.13, as a share of the
// largest value: v's gradient is off by 0.0046 through oneDNN and by 0.041
// through ATen's gemm, for the blocked kernel and LibTorch's whole-matrix
// attention alike. So the bound is LibTorch's own bf16 attention on this
// machine, with room for the blocks' other order of sums, or 0.03 where
// that is larger (the old bound, which the AVX2 EPYC's 0.041 failed).
TEST(CausalAttention, ExplicitKernelUnderAutocastComputesInItsPrecision) {
  torch::manual_seed(7);
  auto q = torch::randn({2, 3, 80, 16}), k = torch::randn({2, 3, 80, 16}),
       v = torch::randn({2, 3, 80, 16}), g = torch::randn({2, 3, 80, 16});
  std::vector<torch::Tensor> ours, libtorchs;
  {
    accelerate::AutocastGuard guard(torch::kCPU, torch::kBFloat16);
    ours = attention_and_grads(explicit_attention, q, k, v, g.to(torch::kBFloat16));
    libtorchs = attention_and_grads(whole_matrix_reference, q, k, v, g.to(torch::kBFloat16));
  }
  auto wide = attention_and_grads(reference, q, k, v, g);
  ASSERT_EQ(ours[0].scalar_type(), torch::kBFloat16);
  for (size_t i = 0; i < ours.size(); ++i) {
    if (i > 0) EXPECT_EQ(ours[i].scalar_type(), torch::kFloat) << "gradient " << i;
    const double scale = wide[i].abs().max().item<double>();
    const double libtorch_error =
        (libtorchs[i].to(torch::kFloat) - wide[i]).abs().max().item<double>();
    const double error = (ours[i].to(torch::kFloat) - wide[i]).abs().max().item<double>();
    EXPECT_LT(error, std::max(0.03 * scale, 1.5 * libtorch_error))
        << "tensor " << i << ": LibTorch's own bf16 is off by " << libtorch_error / scale
        << " of the largest value";
  }
}

TEST(CausalAttention, ANaNScorePoisonsOnlyTheRowsThatSeeIt) {
  auto q = torch::randn({1, 1, 6, 4}), k = torch::randn({1, 1, 6, 4}),
       v = torch::randn({1, 1, 6, 4});
  k[0][0][3][0] = std::numeric_limits<float>::quiet_NaN();  // key 3: seen by queries 3, 4, 5
  auto out = explicit_attention(q, k, v);
  EXPECT_FALSE(out.slice(2, 0, 3).isnan().any().item<bool>());
  EXPECT_TRUE(out.slice(2, 3, 6).isnan().all().item<bool>());
}

TEST(CausalAttention, FusedKernelAgreesWithTheExplicitOneWhereItExists) {
  torch::manual_seed(0);
  auto q = torch::randn({2, 4, 16, 8}), k = torch::randn({2, 4, 16, 8}),
       v = torch::randn({2, 4, 16, 8});
  if (!accelerate::fused_attention_available()) {
    EXPECT_THROW(
        accelerate::causal_attention(q, k, v, AttentionOptions().kernel(AttentionKernel::kFused)),
        accelerate::Error);
    GTEST_SKIP() << "this LibTorch has no fused attention (1.13)";
  }
  auto fused =
      accelerate::causal_attention(q, k, v, AttentionOptions().kernel(AttentionKernel::kFused));
  auto plain =
      accelerate::causal_attention(q, k, v, AttentionOptions().kernel(AttentionKernel::kExplicit));
  EXPECT_TRUE(torch::allclose(fused, plain, 1e-5, 1e-6));
}

// kAuto's choice on CPU: without dropout, float and bfloat16 up to 1024
// tokens take the explicit (blocked) kernel, the faster there
// (bench/gpt/attention_bench); with dropout only bfloat16 up to 256 tokens
// does; the rest takes the fused one where it exists.
TEST(CausalAttention, AutoTakesTheExplicitKernelForShortSequencesOnCpu) {
  torch::manual_seed(5);
  for (double dropout : {0.0, 0.5}) {
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      for (int64_t tokens : {256, 257, 1024, 1025}) {
        auto q = torch::randn({1, 1, tokens, 8}).to(dtype),
             k = torch::randn({1, 1, tokens, 8}).to(dtype),
             v = torch::randn({1, 1, tokens, 8}).to(dtype);
        const bool explicit_expected =
            !accelerate::fused_attention_available() ||
            (dropout == 0 ? tokens <= 1024 : dtype == torch::kBFloat16 && tokens <= 256);
        auto attend = [&](AttentionKernel kernel) {
          torch::manual_seed(9);  // the same dropout masks on both sides
          return accelerate::causal_attention(q, k, v,
                                              AttentionOptions().kernel(kernel).dropout_p(dropout));
        };
        EXPECT_TRUE(torch::equal(
            attend(AttentionKernel::kAuto),
            attend(explicit_expected ? AttentionKernel::kExplicit : AttentionKernel::kFused)))
            << dtype << " " << tokens << " tokens, dropout " << dropout;
      }
    }
  }
}

// Mistral's and Qwen2's sliding window: each query sees itself and the
// window - 1 keys before it, on every kernel; a window as long as the
// sequence is the plain causal attention.
TEST(CausalAttention, SlidingWindowSeesOnlyTheLastWindowKeys) {
  torch::manual_seed(6);
  auto q = torch::randn({2, 3, 9, 8}), k = torch::randn({2, 3, 9, 8}),
       v = torch::randn({2, 3, 9, 8});
  std::vector<AttentionKernel> kernels = {AttentionKernel::kAuto, AttentionKernel::kExplicit};
  if (accelerate::fused_attention_available()) kernels.push_back(AttentionKernel::kFused);
  for (const auto kernel : kernels) {
    for (const int64_t window : {1, 4, 9, 20}) {
      auto out = accelerate::causal_attention(
          q, k, v, AttentionOptions().kernel(kernel).sliding_window(window));
      EXPECT_TRUE(torch::allclose(out, windowed_reference(q, k, v, window), 1e-5, 1e-6))
          << "window " << window << " kernel " << static_cast<int>(kernel);
    }
  }
  // The window changes the result (else the check above could not fail).
  EXPECT_FALSE(torch::allclose(windowed_reference(q, k, v, 4), reference(q, k, v), 1e-3, 1e-3));
  EXPECT_THROW(accelerate::causal_attention(q, k, v, AttentionOptions().sliding_window(-1)),
               accelerate::Error);
  EXPECT_THROW(
      accelerate::bidirectional_attention(q, k, v, {}, AttentionOptions().sliding_window(4)),
      accelerate::Error);
}

TEST(CausalAttention, DropoutZeroesWeightsOnlyWhenAsked) {
  torch::manual_seed(0);
  auto q = torch::randn({1, 1, 8, 4}), k = torch::randn({1, 1, 8, 4}),
       v = torch::randn({1, 1, 8, 4});
  const auto plain = accelerate::causal_attention(q, k, v);
  EXPECT_TRUE(torch::equal(plain, accelerate::causal_attention(q, k, v)));
  EXPECT_FALSE(torch::allclose(
      plain, accelerate::causal_attention(q, k, v, AttentionOptions().dropout_p(0.5))));
}

TEST(CausalAttention, BadShapesAndDropoutAreErrors) {
  auto q = torch::randn({1, 2, 4, 8});
  EXPECT_THROW(accelerate::causal_attention(q, q, torch::randn({1, 2, 5, 8})), accelerate::Error);
  EXPECT_THROW(accelerate::causal_attention(q[0], q[0], q[0]), accelerate::Error);
  EXPECT_THROW(accelerate::causal_attention(q, q, q, AttentionOptions().dropout_p(1.0)),
               accelerate::Error);
}

}  // namespace
