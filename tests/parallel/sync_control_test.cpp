// no_sync (gradient accumulation), and the misuses the reducer reports
// instead of hanging: mismatched parameters across ranks, toggling sync in
// the middle of a step, two backward passes without finalize_backward().
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/common/errors.h"
#include "accelerate/parallel/gradient_reducer.h"
#include "parallel/parallel_test_support.h"
#include "support/thread_ranks.h"

using accelerate::Communicator;
using accelerate::GradientReducer;
using accelerate::GradientSyncOptions;
using namespace accelerate::testing;

namespace {

bool same_on_every_rank(Communicator& comm, const torch::Tensor& t) {
  for (const auto& theirs : comm.all_gather_same_shape(t)) {
    if (!torch::equal(theirs, t)) return false;
  }
  return true;
}

TEST(NoSync, GradsDifferAfterNoSyncStepAndTheSyncedStepCarriesTheSum) {
  torch::set_num_threads(1);
  run_ranks(2, [](Communicator& comm) {
    const int rank = comm.rank();
    BranchyNet net;
    BranchyNet reference;
    GradientReducer reducer(borrow(comm), net->parameters(),
                            GradientSyncOptions().first_bucket_cap_mb(1e-9).bucket_cap_mb(1e-3));
    reducer.set_sync_enabled(false);
    EXPECT_FALSE(reducer.sync_enabled());
    branchy_loss(net, rank, 0, true).backward();
    reducer.finalize_backward();  // a no-op while sync is off
    EXPECT_FALSE(same_on_every_rank(comm, net->fc1->weight.grad()));
    EXPECT_EQ(reducer.last_step_stats().synced_steps, 0);

    reducer.set_sync_enabled(true);
    branchy_loss(net, rank, 1, true).backward();
    reducer.finalize_backward();

    branchy_loss(reference, rank, 0, true).backward();
    branchy_loss(reference, rank, 1, true).backward();
    auto expected = blocking_average(comm, reference->parameters());
    auto params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!expected[i].defined()) continue;
      EXPECT_TRUE(torch::equal(params[i].grad(), expected[i])) << "parameter " << i;
      EXPECT_TRUE(same_on_every_rank(comm, params[i].grad()));
    }
    EXPECT_EQ(reducer.last_step_stats().synced_steps, 1);
  });
}

TEST(NoSync, ParameterUsedOnlyInAnAccumulationStepCountsAsUsed) {
  torch::set_num_threads(1);
  run_ranks(2, [](Communicator& comm) {
    const int rank = comm.rank();
    BranchyNet net;
    BranchyNet reference;
    GradientReducer reducer(borrow(comm), net->parameters());
    reducer.set_sync_enabled(false);
    branchy_loss(net, rank, 0, /*use_branch=*/true).backward();
    reducer.finalize_backward();
    reducer.set_sync_enabled(true);
    branchy_loss(net, rank, 1, /*use_branch=*/false).backward();
    reducer.finalize_backward();
    branchy_loss(reference, rank, 0, true).backward();
    branchy_loss(reference, rank, 1, false).backward();
    auto expected = blocking_average(comm, reference->parameters());
    EXPECT_TRUE(torch::equal(net->branch->weight.grad(), expected[kBranchWeight]));
    EXPECT_EQ(reducer.unused_parameter_warnings(), 0);
  });
}

TEST(Misuse, ParametersThatDifferBetweenRanksAreReportedOnEveryRank) {
  torch::set_num_threads(1);
  run_ranks(2, [](Communicator& comm) {
    std::vector<torch::Tensor> params{torch::zeros({4, 4}).set_requires_grad(true)};
    if (comm.rank() == 1) params.push_back(torch::zeros({3}).set_requires_grad(true));
    try {
      GradientReducer reducer(borrow(comm), params);
      ADD_FAILURE() << "no error on rank " << comm.rank();
    } catch (const accelerate::Error& error) {
      EXPECT_NE(std::string(error.what()).find("registered different parameters"),
                std::string::npos)
          << error.what();
    }
  });
}

TEST(Misuse, TogglingSyncMidStepThrowsAndTheStepStillFinishes) {
  torch::set_num_threads(1);
  run_ranks(2, [](Communicator& comm) {
    BranchyNet net;
    GradientReducer reducer(borrow(comm), net->parameters());
    branchy_loss(net, comm.rank(), 0, true).backward();
    EXPECT_THROW(reducer.set_sync_enabled(false), accelerate::Error);
    reducer.finalize_backward();
    EXPECT_TRUE(same_on_every_rank(comm, net->fc2->weight.grad()));
    reducer.set_sync_enabled(false);  // fine between steps
  });
}

TEST(Misuse, TwoBackwardPassesWithoutFinalizeThrowFromBackward) {
  torch::set_num_threads(1);
  run_ranks(2, [](Communicator& comm) {
    BranchyNet net;
    GradientReducer reducer(borrow(comm), net->parameters());
    branchy_loss(net, comm.rank(), 0, true).backward();
    try {
      branchy_loss(net, comm.rank(), 1, true).backward();
      ADD_FAILURE() << "second backward did not throw";
    } catch (const std::exception& error) {
      EXPECT_NE(std::string(error.what()).find("twice"), std::string::npos) << error.what();
    }
    reducer.finalize_backward();  // the buckets launched by the first pass complete
    EXPECT_EQ(reducer.last_step_stats().synced_steps, 1);
  });
}

TEST(Reducer, FreeingTheReducerRemovesItsHooks) {
  torch::set_num_threads(1);
  run_ranks(2, [](Communicator& comm) {
    BranchyNet net;
    { GradientReducer reducer(borrow(comm), net->parameters()); }
    // With hooks left behind this would touch freed memory or launch
    // collectives that the other rank never matches.
    branchy_loss(net, comm.rank(), 0, true).backward();
    EXPECT_FALSE(same_on_every_rank(comm, net->fc1->weight.grad()));
  });
}

}  // namespace
