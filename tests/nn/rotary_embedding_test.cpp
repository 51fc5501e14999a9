// accelerate::rotary_embedding: the fused CPU kernel against transformers'
// apply_rotary_pos_emb in LibTorch ops (forward and the gradient, float and
// bfloat16, several parallel tasks, positions beyond the first batch row),
// the paths that stay composite, and the one-line error for bad shapes.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/nn/rotary_embedding.h"

namespace {

// transformers: q * cos + rotate_half(q) * sin, on [batch, heads, tokens, d];
// here on [batch, tokens, heads, d] through the transposes.
torch::Tensor composite(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin) {
  const auto q = x.transpose(1, 2);
  const int64_t half = q.size(-1) / 2;
  const auto rotated = torch::cat({-q.narrow(-1, half, half), q.narrow(-1, 0, half)}, -1);
  return (q * cos + rotated * sin).transpose(1, 2);
}

// cos and sin of transformers' default rope for `tokens` positions.
std::pair<torch::Tensor, torch::Tensor> tables(int64_t tokens, int64_t dim) {
  const auto inv_freq =
      1.0 / torch::pow(10000.0, torch::arange(0, dim, 2, torch::kFloat) / static_cast<double>(dim));
  const auto freqs = torch::arange(tokens, torch::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  const auto angles = torch::cat({freqs, freqs}, -1);
  return {angles.cos(), angles.sin()};
}

double rotary_max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

TEST(RotaryEmbedding, FloatMatchesTransformersForwardAndBackward) {
  // [3, 5, 2, 8]: a row per task, positions repeating per batch row;
  // [4, 256, 8, 64]: the Llama bench's query shape, several tasks.
  for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 5, 2, 8}, {4, 256, 8, 64}}) {
    torch::manual_seed(4);
    const auto [cos, sin] = tables(shape[1], shape[3]);
    const auto x = torch::randn(shape), g = torch::randn(shape);
    auto ours_in = x.clone().requires_grad_(), theirs_in = x.clone().requires_grad_();
    const auto ours = accelerate::rotary_embedding(ours_in, cos, sin);
    const auto theirs = composite(theirs_in, cos, sin);
    const std::string what = c10::str(torch::IntArrayRef(shape));
    EXPECT_LE(rotary_max_diff(ours, theirs), 1e-6) << what;
    ours.backward(g);
    theirs.backward(g);
    EXPECT_LE(rotary_max_diff(ours_in.grad(), theirs_in.grad()), 1e-6) << what;
    // The rotation moves values between the halves, so a wrong sign or
    // half would show: the result is far from x.
    EXPECT_GT(rotary_max_diff(ours, x), 0.5) << what;
  }
}

TEST(RotaryEmbedding, BFloat16IsTheFloatResultRoundedOnce) {
  torch::manual_seed(5);
  const auto [cos32, sin32] = tables(16, 32);
  const auto x = torch::randn({2, 16, 4, 32}).to(torch::kBFloat16);
  const auto cos = cos32.to(torch::kBFloat16), sin = sin32.to(torch::kBFloat16);
  const auto ours = accelerate::rotary_embedding(x, cos, sin);
  EXPECT_EQ(ours.scalar_type(), torch::kBFloat16);
  const auto exact = composite(x.to(torch::kFloat), cos.to(torch::kFloat), sin.to(torch::kFloat));
  EXPECT_GT(ours.eq(exact.to(torch::kBFloat16)).to(torch::kDouble).mean().item<double>(), 0.99);
  // transformers' bfloat16 composite rounds after each op: within a few ulps.
  EXPECT_LE(rotary_max_diff(ours, composite(x, cos, sin)), 3e-2);
}

TEST(RotaryEmbedding, OtherCasesStayCompositeAndBadShapesAreErrors) {
  const auto [cos, sin] = tables(6, 4);
  const auto xd = torch::randn({1, 6, 2, 4}, torch::kDouble);
  EXPECT_TRUE(
      torch::equal(accelerate::rotary_embedding(xd, cos.to(torch::kDouble), sin.to(torch::kDouble)),
                   composite(xd, cos.to(torch::kDouble), sin.to(torch::kDouble))));
  // A non-contiguous x (heads first, transposed back) gives the same values.
  const auto x = torch::randn({1, 2, 6, 4}).transpose(1, 2);
  EXPECT_TRUE(torch::allclose(accelerate::rotary_embedding(x, cos, sin), composite(x, cos, sin),
                              1e-6, 1e-6));
  try {
    accelerate::rotary_embedding(torch::randn({1, 6, 2, 4}), cos.narrow(0, 0, 5), sin);
    FAIL() << "cos of 5 positions for 6 tokens was taken";
  } catch (const accelerate::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "rotary_embedding: expects x [batch, tokens, heads, head_dim] (head_dim even) and "
              "cos, sin [tokens, head_dim], got x [1, 6, 2, 4], cos [5, 4], sin [6, 4]");
  }
}

}  // namespace
