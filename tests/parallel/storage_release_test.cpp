// release_storage / materialize_storage (src/parallel/storage_release.h), the
// mechanism ZeRO stage 3 needs: a layer's parameters alias a flat buffer;
// the buffer's memory is freed after forward and given back (refilled)
// before backward, and the gradients equal those of a run that never freed
// it, because autograd's saved tensors share the storage object.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "parallel/storage_alias.h"
#include "parallel/storage_release.h"

namespace storage_release_test {

using accelerate::detail::materialize_storage;
using accelerate::detail::release_storage;
using accelerate::detail::storage_alias;
using accelerate::detail::storage_released;

struct FlatLinear {
  torch::nn::Linear linear{torch::nn::Linear(6, 3)};
  at::Tensor flat;
  FlatLinear() {
    torch::manual_seed(3);
    linear = torch::nn::Linear(6, 3);
    flat = at::empty({3 * 6 + 3});
    flat.narrow(0, 0, 18).copy_(linear->weight.detach().reshape({-1}));
    flat.narrow(0, 18, 3).copy_(linear->bias.detach());
    torch::NoGradGuard no_grad;
    linear->weight.set_data(storage_alias(flat, 0, {3, 6}));
    linear->bias.set_data(storage_alias(flat, 18, {3}));
  }
};

TEST(StorageRelease, GradientsSurviveFreeingAndRefillingBetweenForwardAndBackward) {
  auto x = torch::randn({5, 6}, torch::requires_grad());
  FlatLinear reference;
  reference.linear->forward(x).pow(2).sum().backward();
  const auto expected_weight = reference.linear->weight.grad().clone();
  const auto expected_input = x.grad().clone();
  x.mutable_grad().reset();

  FlatLinear layer;
  auto loss = layer.linear->forward(x).pow(2).sum();  // saves the weight for x's gradient
  const auto values = layer.flat.clone();
  const std::size_t bytes = layer.flat.numel() * sizeof(float);
  release_storage(layer.flat);
  EXPECT_TRUE(storage_released(layer.flat));
  EXPECT_EQ(layer.linear->weight.data_ptr(), nullptr);
  materialize_storage(layer.flat, bytes);
  EXPECT_FALSE(storage_released(layer.flat));
  layer.flat.copy_(values);  // what an all-gather would write
  loss.backward();
  EXPECT_TRUE(torch::equal(layer.linear->weight.grad(), expected_weight));
  EXPECT_TRUE(torch::equal(x.grad(), expected_input));
}

TEST(StorageRelease, FreesTheMemoryAndMaterializingTwiceKeepsIt) {
  FlatLinear layer;
  const std::size_t bytes = layer.flat.numel() * sizeof(float);
  release_storage(layer.flat);
  release_storage(layer.flat);  // idempotent
  EXPECT_EQ(layer.flat.storage().nbytes(), 0u);
  materialize_storage(layer.flat, bytes);
  void* first = layer.flat.data_ptr();
  layer.flat.fill_(2.0);
  materialize_storage(layer.flat, bytes);  // already there: same memory, same values
  EXPECT_EQ(layer.flat.data_ptr(), first);
  EXPECT_EQ(layer.linear->bias.data_ptr<float>()[0], 2.0f);
}

}  // namespace storage_release_test
