// Sharded (reduce-scattered) buckets whose gradients autograd writes
// straight into the reduce-scatter buffer (GradientReducer::
// begin_bucket_gradients, which ZeRO stage 3 calls as a unit's backward
// begins): the same averaged shards as copying the gradients in at launch,
// with the parameters' .grad views of one buffer until then, accumulated
// no_sync gradients carried in, and nothing done while sync is off.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "accelerate/parallel/gradient_reducer.h"
#include "parallel/parallel_test_support.h"
#include "parallel/sharded_gradients.h"
#include "support/thread_ranks.h"

namespace sharded_buckets_test {

using accelerate::Communicator;
using accelerate::GradientPartition;
using accelerate::GradientReducer;
using accelerate::GradientSyncOptions;
using namespace accelerate::testing;

GradientSyncOptions small_buckets() {
  return GradientSyncOptions().first_bucket_cap_mb(1e-9).bucket_cap_mb(1e-3);
}

// Every bucket's averaged shard on this rank after `no_sync_steps` local
// backward passes and one synced one; with `begin`, each bucket's gradients
// are bound into its buffer before the synced backward pass.
std::vector<torch::Tensor> shards_after(Communicator& comm, int no_sync_steps, bool begin) {
  BranchyNet net;
  GradientReducer reducer(borrow(comm), net->parameters(), small_buckets());
  accelerate::detail::ShardedGradients::partition_buckets(reducer, GradientPartition::kSharded);
  reducer.set_sync_enabled(false);
  for (int step = 0; step < no_sync_steps; ++step) {
    branchy_loss(net, comm.rank(), step, true).backward();
    reducer.finalize_backward();
  }
  reducer.set_sync_enabled(true);
  if (begin) {
    for (std::size_t b = 0; b < reducer.buckets().size(); ++b)
      accelerate::detail::ShardedGradients::begin_bucket_gradients(reducer, b);
  }
  branchy_loss(net, comm.rank(), no_sync_steps, true).backward();
  reducer.finalize_backward();
  std::vector<torch::Tensor> shards;
  for (std::size_t b = 0; b < reducer.buckets().size(); ++b) {
    shards.push_back(accelerate::detail::ShardedGradients::gradient_shard(reducer, b).clone());
  }
  for (const auto& p : net->parameters()) {
    EXPECT_FALSE(p.grad().defined()) << "full gradients are released after the sync";
  }
  return shards;
}

void expect_equal(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  bool any_nonzero = false;
  for (std::size_t b = 0; b < got.size(); ++b) {
    EXPECT_TRUE(torch::equal(got[b], want[b])) << "bucket " << b;
    any_nonzero = any_nonzero || want[b].abs().sum().item<double>() > 0;
  }
  EXPECT_TRUE(any_nonzero) << "all-zero shards would prove nothing";
}

TEST(ShardedBuckets, GradientsWrittenIntoTheBufferAverageAsCopiedOnes) {
  torch::set_num_threads(1);
  run_ranks(2, [](Communicator& comm) {
    for (int no_sync_steps : {0, 2}) {
      SCOPED_TRACE(std::to_string(no_sync_steps) + " no_sync steps first");
      expect_equal(shards_after(comm, no_sync_steps, /*begin=*/true),
                   shards_after(comm, no_sync_steps, /*begin=*/false));
    }
  });
}

TEST(ShardedBuckets, BeginMakesTheGradientsViewsOfOneZeroedBuffer) {
  torch::set_num_threads(1);
  run_ranks(2, [](Communicator& comm) {
    BranchyNet net;
    GradientReducer reducer(borrow(comm), net->parameters(), GradientSyncOptions());
    accelerate::detail::ShardedGradients::partition_buckets(reducer, GradientPartition::kSharded);
    ASSERT_EQ(reducer.buckets().size(), 1u);  // one bucket: every trainable parameter
    reducer.set_sync_enabled(false);
    accelerate::detail::ShardedGradients::begin_bucket_gradients(reducer, 0);
    EXPECT_FALSE(net->fc1->weight.grad().defined()) << "nothing while sync is off";
    branchy_loss(net, comm.rank(), 0, true).backward();  // accumulated locally
    const torch::Tensor accumulated = net->fc2->weight.grad().clone();
    reducer.finalize_backward();
    reducer.set_sync_enabled(true);
    accelerate::detail::ShardedGradients::begin_bucket_gradients(reducer, 0);
    const auto& parameters = reducer.parameters();
    const std::size_t first = reducer.buckets()[0].parameter_indices.front();
    for (std::size_t index : reducer.buckets()[0].parameter_indices) {
      const torch::Tensor& grad = parameters[index].grad();
      ASSERT_TRUE(grad.defined()) << "parameter " << index;
      EXPECT_TRUE(grad.is_alias_of(parameters[first].grad())) << "parameter " << index;
      EXPECT_EQ(grad.sizes(), parameters[index].sizes());
    }
    EXPECT_TRUE(torch::equal(net->fc2->weight.grad(), accumulated)) << "no_sync sums carried in";
    EXPECT_FALSE(net->frozen->weight.grad().defined()) << "frozen: in no bucket";
    branchy_loss(net, comm.rank(), 1, true).backward();
    reducer.finalize_backward();
    EXPECT_FALSE(net->fc1->weight.grad().defined());
  });
}

}  // namespace sharded_buckets_test
