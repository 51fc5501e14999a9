// accelerate::causal_attention: the explicit kernel against a direct
// computation, the fused kernel (LibTorch 2.x) against the explicit one,
// causality, dropout, and errors for bad shapes.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>

#include "accelerate/attention.h"
#include "accelerate/errors.h"

namespace {

using accelerate::AttentionKernel;
using accelerate::AttentionOptions;

// softmax(q k^T / sqrt(d) with j > i masked) v, one query row at a time.
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  auto out = torch::zeros_like(q);
  const int64_t tokens = q.size(2);
  for (int64_t i = 0; i < tokens; ++i) {
    auto scores = torch::matmul(q.slice(2, i, i + 1), k.slice(2, 0, i + 1).transpose(-2, -1)) /
                  std::sqrt(static_cast<double>(q.size(3)));
    out.slice(2, i, i + 1).copy_(torch::matmul(scores.softmax(-1), v.slice(2, 0, i + 1)));
  }
  return out;
}

TEST(CausalAttention, ExplicitKernelComputesMaskedSoftmaxAttention) {
  torch::manual_seed(0);
  auto q = torch::randn({2, 3, 7, 8}), k = torch::randn({2, 3, 7, 8}),
       v = torch::randn({2, 3, 7, 8});
  auto out =
      accelerate::causal_attention(q, k, v, AttentionOptions().kernel(AttentionKernel::kExplicit));
  EXPECT_TRUE(torch::allclose(out, reference(q, k, v), 1e-5, 1e-6));
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
