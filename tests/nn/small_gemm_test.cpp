// The library's own small matrix product (src/nn/small_gemm.h) against
// LibTorch's in double: every edge of its 8 x 32 register tile, either
// operand transposed, accumulation, an output wider than the product, and
// an empty depth.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <vector>

#include "nn/small_gemm.h"

namespace {

using accelerate::detail::small_gemm;
using accelerate::detail::StridedMatrix;

StridedMatrix view_of(const torch::Tensor& t) {
  return {t.data_ptr<float>(), t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

// A [rows x cols] float matrix, stored transposed when asked (its strides
// then read it column by column).
torch::Tensor matrix(int64_t rows, int64_t cols, bool transposed) {
  return transposed ? torch::randn({cols, rows}).t() : torch::randn({rows, cols});
}

class SmallGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!accelerate::detail::small_gemm_preferred()) {
      GTEST_SKIP() << "this CPU has no AVX-512: small_gemm is not used here";
    }
  }
};

TEST_F(SmallGemm, EqualsLibTorchsProductForEveryEdgeAndLayout) {
  torch::manual_seed(0);
  std::vector<float> scratch;
  for (int64_t rows : {1, 7, 8, 9, 64, 65}) {
    for (int64_t cols : {1, 31, 32, 33, 64, 100}) {
      for (int64_t depth : {1, 17, 64}) {
        for (int layout = 0; layout < 8; ++layout) {
          const bool a_t = layout & 1, b_t = layout & 2, accumulate = layout & 4;
          const auto a = matrix(rows, depth, a_t), b = matrix(depth, cols, b_t);
          // Three columns past the product, which must stay untouched.
          const auto out = torch::randn({rows, cols + 3});
          const auto before = out.clone();
          small_gemm(view_of(a), view_of(b), out.data_ptr<float>(), cols + 3, accumulate, scratch);
          auto expected = torch::mm(a.to(torch::kDouble), b.to(torch::kDouble));
          if (accumulate) expected += before.narrow(1, 0, cols).to(torch::kDouble);
          const double gap =
              (out.narrow(1, 0, cols).to(torch::kDouble) - expected).abs().max().item<double>();
          EXPECT_LT(gap, 1e-4) << rows << "x" << depth << "x" << cols << " layout " << layout;
          EXPECT_TRUE(torch::equal(out.narrow(1, cols, 3), before.narrow(1, cols, 3)))
              << rows << "x" << depth << "x" << cols << " layout " << layout;
        }
      }
    }
  }
}

TEST_F(SmallGemm, AnEmptyDepthWritesZerosOrLeavesTheSum) {
  std::vector<float> scratch;
  const auto a = torch::empty({5, 0}), b = torch::empty({0, 40});
  auto out = torch::randn({5, 40});
  const auto before = out.clone();
  small_gemm(view_of(a), view_of(b), out.data_ptr<float>(), 40, /*accumulate=*/true, scratch);
  EXPECT_TRUE(torch::equal(out, before));
  small_gemm(view_of(a), view_of(b), out.data_ptr<float>(), 40, /*accumulate=*/false, scratch);
  EXPECT_TRUE(torch::equal(out, torch::zeros({5, 40})));
}

}  // namespace
