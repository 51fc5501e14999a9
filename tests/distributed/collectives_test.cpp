// Accelerate's tested collective values on 1, 2 and 3 ranks (threads over a
// FileStore, real Gloo), plus the cases Accelerate gets wrong.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/collectives.h"
#include "accelerate/distributed/process_control.h"
#include "support/thread_ranks.h"

using accelerate::Communicator;
using accelerate::ReduceOp;
using accelerate::testing::run_ranks;

namespace {

std::vector<int64_t> to_vector(const torch::Tensor& t) {
  auto c = t.to(torch::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

std::vector<int64_t> iota(int64_t from, int64_t count) {
  std::vector<int64_t> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = from + i;
  return v;
}

class OnRanks : public ::testing::TestWithParam<int> {};

TEST_P(OnRanks, GatherConcatenatesInRankOrder) {
  const int n = GetParam();
  run_ranks(n, [n](Communicator& comm) {
    auto mine = torch::arange(n) + 1 + n * comm.rank();
    EXPECT_EQ(to_vector(accelerate::gather(comm, mine)), iota(1, n * n));
  });
}

TEST_P(OnRanks, GatherObjectFlattensOneLevel) {
  const int n = GetParam();
  run_ranks(n, [n](Communicator& comm) {
    std::vector<int> mine{comm.rank()};
    std::vector<int> expected;
    for (int r = 0; r < n; ++r) expected.push_back(r);
    EXPECT_EQ(accelerate::gather_object(comm, mine), expected);
    // A non-list value comes back one per rank.
    auto names = accelerate::gather_object(comm, std::string(comm.rank() + 1, 'x'));
    ASSERT_EQ(names.size(), static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) EXPECT_EQ(names[r], std::string(r + 1, 'x'));
  });
}

TEST_P(OnRanks, GatherNonContiguousAndUnequalFirstDims) {
  const int n = GetParam();
  run_ranks(n, [n](Communicator& comm) {
    // Rank r contributes r + 1 rows of a strided (non-contiguous) view.
    auto rows_of = [](int r) {
      return (torch::arange(4 * (r + 1)).reshape({r + 1, 4}) + 100 * r).slice(1, 0, 4, 2);
    };
    auto mine = rows_of(comm.rank());
    ASSERT_FALSE(mine.is_contiguous());
    auto all = accelerate::gather(comm, mine);
    std::vector<torch::Tensor> expected;
    for (int q = 0; q < n; ++q) {
      expected.push_back(rows_of(q));
    }
    EXPECT_TRUE(torch::equal(all, torch::cat(expected, 0)));
  });
}

TEST_P(OnRanks, GatherKeepsBoolAndBFloat16) {
  const int n = GetParam();
  run_ranks(n, [n](Communicator& comm) {
    auto flags = torch::tensor({comm.rank() % 2 == 0, true});
    auto gathered = accelerate::gather(comm, flags);
    EXPECT_EQ(gathered.scalar_type(), torch::kBool);
    EXPECT_EQ(gathered.numel(), 2 * n);
    auto halves = torch::full({3}, 0.5 + comm.rank(), torch::kBFloat16);
    auto all = accelerate::gather(comm, halves);
    EXPECT_EQ(all.scalar_type(), torch::kBFloat16);
    EXPECT_FLOAT_EQ(all[3 * (n - 1)].item<float>(), 0.5f + (n - 1));
  });
}

TEST_P(OnRanks, PadAcrossProcessesKeepsDtype) {
  const int n = GetParam();
  run_ranks(n, [n](Communicator& comm) {
    const int64_t length = comm.rank() == 0 ? n + 1 : n;
    auto mine = torch::arange(1, length + 1, torch::kLong);
    auto padded = accelerate::pad_across_processes(comm, mine);
    EXPECT_EQ(padded.scalar_type(), torch::kLong);
    ASSERT_EQ(padded.size(0), n + 1);
    if (comm.rank() != 0) EXPECT_EQ(padded[n].item<int64_t>(), 0);
    auto first = accelerate::pad_across_processes(comm, mine, 0, /*pad_index=*/-7, true);
    if (comm.rank() != 0 || n == 1) {
      EXPECT_EQ(first[0].item<int64_t>(), n == 1 ? 1 : -7);
    }
  });
}

TEST_P(OnRanks, SplitBetweenProcessesOf17Items) {
  const int n = GetParam();
  run_ranks(n, [n](Communicator& comm) {
    std::vector<int> items = [] {
      std::vector<int> v(17);
      for (int i = 0; i < 17; ++i) v[i] = i;
      return v;
    }();
    auto mine = accelerate::split_between_processes(comm, items);
    const size_t expected = 17 / n + (comm.rank() < 17 % n ? 1 : 0);
    EXPECT_EQ(mine.size(), expected);
    auto everyone = accelerate::gather_object(comm, mine);
    EXPECT_EQ(everyone, items);
    // With padding: ceil(17 / n) each; gathered and truncated gives the input.
    auto padded = accelerate::split_between_processes(comm, items, /*apply_padding=*/true);
    EXPECT_EQ(padded.size(), static_cast<size_t>((17 + n - 1) / n));
    auto rows = accelerate::split_between_processes(comm, torch::arange(17), true);
    auto all_rows = accelerate::gather(comm, rows);
    EXPECT_EQ(to_vector(all_rows.narrow(0, 0, 17)), iota(0, 17));
    auto flat = accelerate::gather_object(comm, padded);
    flat.resize(17);
    EXPECT_EQ(flat, items);
  });
}

TEST_P(OnRanks, TriggerFiresOnceOnEveryRank) {
  const int n = GetParam();
  run_ranks(n, [n](Communicator& comm) {
    accelerate::Trigger trigger;
    EXPECT_FALSE(trigger.check(comm));
    if (comm.rank() == n - 1) trigger.set();
    EXPECT_TRUE(trigger.check(comm));
    EXPECT_FALSE(trigger.check(comm));
  });
}

TEST_P(OnRanks, BroadcastFromLastRank) {
  const int n = GetParam();
  run_ranks(n, [n](Communicator& comm) {
    auto mine = torch::full({2, 2}, comm.rank(), torch::kBFloat16);
    auto got = accelerate::broadcast(comm, mine, n - 1);
    EXPECT_TRUE(torch::equal(got, torch::full({2, 2}, n - 1, torch::kBFloat16)));
    auto word = accelerate::broadcast_object(
        comm, std::string("from ") + std::to_string(comm.rank()), n - 1);
    EXPECT_EQ(word, "from " + std::to_string(n - 1));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, OnRanks, ::testing::Values(1, 2, 3));

TEST(Reduce, SumMeanMaxOnTwoRanks) {
  run_ranks(2, [](Communicator& comm) {
    auto mine = comm.rank() == 0 ? torch::tensor({1.0, 2.0}) : torch::tensor({3.0, 4.0});
    EXPECT_TRUE(
        torch::equal(accelerate::reduce(comm, mine, ReduceOp::kSum), torch::tensor({4.0, 6.0})));
    EXPECT_TRUE(
        torch::equal(accelerate::reduce(comm, mine, ReduceOp::kMean), torch::tensor({2.0, 3.0})));
    EXPECT_TRUE(
        torch::equal(accelerate::reduce(comm, mine, ReduceOp::kMax), torch::tensor({3.0, 4.0})));
    EXPECT_TRUE(torch::equal(accelerate::reduce(comm, mine, ReduceOp::kSum, 0.5),
                             torch::tensor({2.0, 3.0})));
    // The input is not modified.
    EXPECT_EQ(mine[0].item<double>(), comm.rank() == 0 ? 1.0 : 3.0);
  });
}

TEST(Reduce, BFloat16AndBoolWorkOnGloo) {
  run_ranks(2, [](Communicator& comm) {
    auto halves = torch::full({4}, comm.rank() + 1.5, torch::kBFloat16);
    auto sum = accelerate::reduce(comm, halves, ReduceOp::kSum);
    EXPECT_EQ(sum.scalar_type(), torch::kBFloat16);
    EXPECT_FLOAT_EQ(sum[0].item<float>(), 4.0f);
    auto flag = torch::tensor({comm.rank() == 1, false});
    auto any = accelerate::reduce(comm, flag, ReduceOp::kMax);
    EXPECT_EQ(any.scalar_type(), torch::kBool);
    EXPECT_TRUE(any[0].item<bool>());
    EXPECT_FALSE(any[1].item<bool>());
  });
}

TEST(Reduce, MeanOfIntegersIsAnError) {
  run_ranks(2, [](Communicator& comm) {
    EXPECT_THROW(accelerate::reduce(comm, torch::ones({2}, torch::kLong), ReduceOp::kMean),
                 accelerate::Error);
  });
}

}  // namespace

namespace {

// GLOO_SOCKET_IFNAME reaches Gloo through the job's environment (JobState),
// not the process's: the loopback interface works, and an interface that
// does not exist fails the connection, so the name is really used.
TEST(GlooInterface, TheJobsGlooSocketIfnameChoosesTheDevice) {
  EXPECT_EQ(
      accelerate::JobState::from_environment({{"GLOO_SOCKET_IFNAME", "lo"}}).gloo_socket_ifname,
      "lo");
  EXPECT_EQ(accelerate::JobState::from_environment({}).gloo_socket_ifname, "");
  const auto job_on = [](const std::string& ifname) {
    return [ifname](int rank) {
      accelerate::JobState job =
          accelerate::testing::thread_rank_job(rank, 2, std::chrono::seconds(10));
      job.gloo_socket_ifname = ifname;
      return job;
    };
  };
  accelerate::testing::run_ranks_of_jobs(2, job_on("lo"),
                                         [](int, std::shared_ptr<accelerate::Communicator> comm) {
                                           at::Tensor t = at::ones({3});
                                           comm->all_reduce(t, accelerate::ReduceOp::kSum);
                                           EXPECT_TRUE(at::equal(t, at::full({3}, 2.0)));
                                         });
  std::string failure;
  try {
    const std::string path = accelerate::testing::fresh_store_path();
    accelerate::Communicator::connect_through_file(path, job_on("no-such-if0")(0), "127.0.0.1");
  } catch (const std::exception& e) {
    failure = e.what();
  }
  EXPECT_NE(failure.find("no-such-if0"), std::string::npos) << failure;
}

}  // namespace
