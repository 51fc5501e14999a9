// Parameters without a gradient: never a deadlock, one warning, and what
// find_unused_parameters changes (globally unused gradients left untouched;
// prepare_for_backward() lets their buckets start during backward).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>

#include "accelerate/parallel/gradient_reducer.h"
#include "parallel/parallel_test_support.h"
#include "support/thread_ranks.h"

using accelerate::Communicator;
using accelerate::GradientReducer;
using accelerate::GradientSyncOptions;
using accelerate::testing::RankOptions;
using namespace accelerate::testing;

namespace {

// Every parameter alone: the branch's buckets sit in the middle of the order.
GradientSyncOptions one_parameter_per_bucket() {
  return GradientSyncOptions().first_bucket_cap_mb(1e-9).bucket_cap_mb(1e-9);
}

RankOptions short_timeout() {
  RankOptions options;
  options.timeout = std::chrono::seconds(5);  // a deadlock fails fast, not in 30 s
  return options;
}

int count_of(const std::string& text, const std::string& needle) {
  int count = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

TEST(UnusedParameters, NeverDeadlockAndWarnOncePerRank) {
  torch::set_num_threads(1);
  ::testing::internal::CaptureStderr();
  run_ranks(
      2,
      [](Communicator& comm) {
        const int rank = comm.rank();
        BranchyNet net;
        GradientReducer reducer(borrow(comm), net->parameters(), one_parameter_per_bucket());
        for (int step = 0; step < 4; ++step) {
          clear_grads(*net);
          // Rank 0 takes the branch on even steps only; rank 1 never does.
          branchy_loss(net, rank, step, rank == 0 && step % 2 == 0).backward();
          reducer.finalize_backward();
          const auto stats = reducer.last_step_stats();
          if (rank == 1) {
            // Buckets after the branch's must wait for finalize_backward().
            EXPECT_LT(stats.buckets_launched_during_backward, stats.bucket_count);
          }
          EXPECT_TRUE(net->branch->weight.grad().defined());
        }
        EXPECT_EQ(reducer.unused_parameter_warnings(), 1) << "rank " << rank;
      },
      short_timeout());
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(printed, "received no gradient"), 2) << printed;
  EXPECT_EQ(count_of(printed, "rank 1: parameters 4 (shape [16, 16]), 5 (shape [16])"), 1)
      << printed;
  EXPECT_NE(printed.find("find_unused_parameters=true"), std::string::npos);
}

TEST(UnusedParameters, UnusedEverywhereBecomesZeroWithoutFindUnused) {
  torch::set_num_threads(1);
  run_ranks(
      3,
      [](Communicator& comm) {
        BranchyNet net;
        GradientReducer reducer(borrow(comm), net->parameters());
        branchy_loss(net, comm.rank(), 0, false).backward();
        reducer.finalize_backward();
        ASSERT_TRUE(net->branch->weight.grad().defined());
        EXPECT_TRUE(torch::equal(net->branch->weight.grad(), torch::zeros({16, 16})));
        EXPECT_FALSE(net->frozen->weight.grad().defined());  // frozen: never synced
      },
      short_timeout());
}

TEST(FindUnusedParameters, GloballyUnusedGradsStayUntouchedAndNothingIsPrinted) {
  torch::set_num_threads(1);
  ::testing::internal::CaptureStderr();
  run_ranks(
      3,
      [](Communicator& comm) {
        const int rank = comm.rank();
        BranchyNet net;
        BranchyNet reference;
        GradientReducer reducer(borrow(comm), net->parameters(),
                                GradientSyncOptions().find_unused_parameters(true));
        // Step 0: nobody takes the branch. Step 1: only rank 0 does.
        for (int step = 0; step < 2; ++step) {
          clear_grads(*net);
          clear_grads(*reference);
          branchy_loss(net, rank, step, step == 1 && rank == 0).backward();
          reducer.finalize_backward();
          branchy_loss(reference, rank, step, step == 1 && rank == 0).backward();
          auto expected = blocking_average(comm, reference->parameters());
          if (step == 0) {
            EXPECT_FALSE(net->branch->weight.grad().defined());
            EXPECT_FALSE(net->branch->bias.grad().defined());
          } else {
            ASSERT_TRUE(net->branch->weight.grad().defined());
            EXPECT_TRUE(torch::allclose(net->branch->weight.grad(), expected[kBranchWeight]));
          }
          EXPECT_TRUE(torch::allclose(net->fc1->weight.grad(), expected[0]));
        }
        EXPECT_EQ(reducer.unused_parameter_warnings(), 0);
      },
      short_timeout());
  EXPECT_EQ(count_of(::testing::internal::GetCapturedStderr(), "received no gradient"), 0);
}

TEST(FindUnusedParameters, ExistingGradOfAParameterNobodyUsedIsKept) {
  torch::set_num_threads(1);
  run_ranks(
      2,
      [](Communicator& comm) {
        BranchyNet net;
        GradientReducer reducer(borrow(comm), net->parameters(),
                                GradientSyncOptions().find_unused_parameters(true));
        // An existing .grad (say from a step before) of a parameter nobody
        // uses now is left as it is on each rank, not averaged.
        net->branch->weight.mutable_grad() = torch::full({16, 16}, 1.0 + comm.rank());
        branchy_loss(net, comm.rank(), 0, false).backward();
        reducer.finalize_backward();
        EXPECT_TRUE(
            torch::equal(net->branch->weight.grad(), torch::full({16, 16}, 1.0 + comm.rank())));
      },
      short_timeout());
}

// With find_unused_parameters, prepare_for_backward(loss) finds the branch
// unreachable and marks it ready up front, so no bucket waits for finalize.
void check_launches(bool find_unused, bool prepare, bool all_launch_in_backward) {
  torch::set_num_threads(1);
  run_ranks(
      2,
      [&](Communicator& comm) {
        BranchyNet net;
        BranchyNet reference;
        GradientReducer reducer(borrow(comm), net->parameters(),
                                one_parameter_per_bucket().find_unused_parameters(find_unused));
        auto loss = branchy_loss(net, comm.rank(), 0, false);
        if (prepare) reducer.prepare_for_backward({loss});
        loss.backward();
        reducer.finalize_backward();
        const auto stats = reducer.last_step_stats();
        if (all_launch_in_backward) {
          EXPECT_EQ(stats.buckets_launched_during_backward, stats.bucket_count);
        } else {
          EXPECT_LT(stats.buckets_launched_during_backward, stats.bucket_count);
        }
        branchy_loss(reference, comm.rank(), 0, false).backward();
        auto expected = blocking_average(comm, reference->parameters());
        auto params = net->parameters();
        for (size_t i : {size_t{0}, size_t{1}, size_t{6}, size_t{7}, size_t{8}, size_t{9}}) {
          EXPECT_TRUE(torch::equal(params[i].grad(), expected[i])) << "parameter " << i;
        }
      },
      short_timeout());
}

TEST(FindUnusedParameters, PrepareForBackwardStartsBucketsOfUnreachableParameters) {
  check_launches(/*find_unused=*/true, /*prepare=*/true, /*all_launch_in_backward=*/true);
}

TEST(FindUnusedParameters, WithoutPrepareTheirBucketsWaitForFinalize) {
  check_launches(/*find_unused=*/true, /*prepare=*/false, /*all_launch_in_backward=*/false);
}

TEST(FindUnusedParameters, PrepareDoesNothingWhenTheOptionIsOff) {
  check_launches(/*find_unused=*/false, /*prepare=*/true, /*all_launch_in_backward=*/false);
}

}  // namespace
