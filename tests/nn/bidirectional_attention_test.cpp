// accelerate::bidirectional_attention (encoders): every query sees every
// kept key, padded keys are left out, a query with no kept key averages
// them as transformers does, both kernels agree, and bad masks are errors.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>

#include "accelerate/common/errors.h"
#include "accelerate/nn/attention.h"

namespace {

using accelerate::AttentionKernel;
using accelerate::AttentionOptions;

// For each batch row, attention over only the keys `mask` keeps, computed
// on the sliced tensors (no masking arithmetic at all).
torch::Tensor sliced_reference(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& mask) {
  auto out = torch::zeros_like(q);
  for (int64_t b = 0; b < q.size(0); ++b) {
    const auto kept = mask[b].nonzero().squeeze(1);
    const auto kb = k[b].index_select(1, kept), vb = v[b].index_select(1, kept);
    const auto scores =
        torch::matmul(q[b], kb.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
    out[b].copy_(torch::matmul(scores.softmax(-1), vb));
  }
  return out;
}

TEST(BidirectionalAttention, PaddedKeysAreLeftOutOnEitherKernel) {
  torch::manual_seed(0);
  auto q = torch::randn({2, 3, 6, 8}), k = torch::randn({2, 3, 6, 8}),
       v = torch::randn({2, 3, 6, 8});
  // Row 0 full, row 1 padded after 4 tokens (int64, as tokenizers give it).
  const auto mask = torch::tensor({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}).view({2, 6});
  const auto expected = sliced_reference(q, k, v, mask);
  const auto plain = accelerate::bidirectional_attention(
      q, k, v, mask, AttentionOptions().kernel(AttentionKernel::kExplicit));
  EXPECT_TRUE(torch::allclose(plain, expected, 1e-5, 1e-6));
  // Not causal: the first query's output depends on the last key.
  auto k2 = k.clone();
  k2.select(2, 5).add_(1.0);
  EXPECT_FALSE(
      torch::allclose(plain.select(2, 0)[0],
                      accelerate::bidirectional_attention(
                          q, k2, v, mask, AttentionOptions().kernel(AttentionKernel::kExplicit))
                          .select(2, 0)[0]));
  if (!accelerate::fused_attention_available()) {
    EXPECT_THROW(accelerate::bidirectional_attention(
                     q, k, v, mask, AttentionOptions().kernel(AttentionKernel::kFused)),
                 accelerate::Error);
    GTEST_SKIP() << "this LibTorch has no fused attention (1.13)";
  }
  const auto fused = accelerate::bidirectional_attention(
      q, k, v, mask, AttentionOptions().kernel(AttentionKernel::kFused));
  EXPECT_TRUE(torch::allclose(fused, expected, 1e-5, 1e-6));
}

TEST(BidirectionalAttention, WithoutAMaskEveryKeyCounts) {
  torch::manual_seed(1);
  auto q = torch::randn({1, 2, 5, 4}), k = torch::randn({1, 2, 5, 4}),
       v = torch::randn({1, 2, 5, 4});
  EXPECT_TRUE(torch::allclose(accelerate::bidirectional_attention(q, k, v),
                              sliced_reference(q, k, v, torch::ones({1, 5})), 1e-5, 1e-6));
}

TEST(BidirectionalAttention, AQueryWithNoKeptKeyAveragesInsteadOfNaN) {
  auto q = torch::randn({1, 1, 3, 4}), k = torch::randn({1, 1, 3, 4}),
       v = torch::randn({1, 1, 3, 4});
  const auto out = accelerate::bidirectional_attention(
      q, k, v, torch::zeros({1, 3}), AttentionOptions().kernel(AttentionKernel::kExplicit));
  EXPECT_TRUE(torch::allclose(out[0][0][0], v[0][0].mean(0), 1e-5, 1e-6));
}

TEST(BidirectionalAttention, BadMasksAreErrors) {
  auto q = torch::randn({2, 2, 4, 8});
  EXPECT_THROW(accelerate::bidirectional_attention(q, q, q, torch::ones({2, 5})),
               accelerate::Error);
  EXPECT_THROW(accelerate::bidirectional_attention(q, q, q, torch::ones({1, 4})),
               accelerate::Error);
  EXPECT_THROW(accelerate::bidirectional_attention(q, q, q, torch::ones({2, 1, 4})),
               accelerate::Error);
}

}  // namespace
