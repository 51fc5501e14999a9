// accelerate::init_empty_weights(): modules built inside hold CPU tensors of
// the right shapes whose pages the operating system never backs (mincore
// shows them not resident), and computation after the guard is normal.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "accelerate/memory/empty_weights.h"

namespace empty_weights_test {

// The share of `tensor`'s memory pages that are resident.
double resident_share(const at::Tensor& tensor) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(tensor.data_ptr()) / page * page;
  const auto end = reinterpret_cast<std::uintptr_t>(tensor.data_ptr()) + tensor.nbytes();
  std::vector<unsigned char> pages((end - begin + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(begin), end - begin, pages.data()) != 0) return -1;
  std::size_t resident = 0;
  for (unsigned char flags : pages) resident += flags & 1;
  return static_cast<double>(resident) / static_cast<double>(pages.size());
}

// 64 MB: above glibc's largest mmap threshold, so the weight gets fresh
// pages of its own whatever earlier tests freed.
torch::nn::Linear big_layer() { return torch::nn::Linear(4096, 4096); }

TEST(EmptyWeights, ModulesBuiltInsideHaveTheirShapesAndNoResidentMemory) {
  torch::nn::Linear empty{nullptr};
  {
    auto guard = accelerate::init_empty_weights();
    EXPECT_TRUE(guard.active());
    empty = big_layer();
  }
  torch::nn::Linear built = big_layer();
  ASSERT_EQ(empty->weight.sizes(), built->weight.sizes());
  EXPECT_TRUE(empty->weight.device().is_cpu());
  EXPECT_TRUE(empty->weight.requires_grad());
  EXPECT_LT(resident_share(empty->weight), 0.01) << "the initialiser wrote the weight";
  EXPECT_GT(resident_share(built->weight), 0.99) << "the check cannot tell (mincore)";

  // Writing the weights after the guard gives ordinary tensors.
  {
    torch::NoGradGuard no_grad;
    empty->weight.copy_(built->weight);
    empty->bias.copy_(built->bias);
  }
  const auto x = torch::randn({2, 4096});
  EXPECT_TRUE(at::equal(empty->forward(x), built->forward(x)));
}

TEST(EmptyWeights, AnInactiveOrMovedGuardChangesNothing) {
  {
    accelerate::EmptyWeightsGuard inactive(false);
    EXPECT_FALSE(inactive.active());
    EXPECT_EQ(torch::ones({3}).sum().item<float>(), 3.0f);
  }
  std::optional<accelerate::EmptyWeightsGuard> moved;
  {
    auto guard = accelerate::init_empty_weights();
    moved.emplace(std::move(guard));
    EXPECT_FALSE(guard.active());  // NOLINT(bugprone-use-after-move): what a move leaves
  }
  EXPECT_TRUE(moved->active());
  torch::nn::Linear layer = big_layer();
  EXPECT_LT(resident_share(layer->weight), 0.01) << "the moved guard still acts";
  moved.reset();
  EXPECT_EQ(torch::ones({3}).sum().item<float>(), 3.0f) << "computation after the guard";
}

}  // namespace empty_weights_test
