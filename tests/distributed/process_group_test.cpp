// Process groups (Communicator::new_group / split): four thread ranks act as
// two machines of two processes. Collectives in a group involve its members
// only and give their rank-ordered sums; a group inside one machine uses
// shared memory although the job spans two; groups made out of order or not
// at all are errors that name the processes, in bounded time.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "distributed/rank_contributions.h"
#include "support/thread_ranks.h"

namespace process_group_test {

using accelerate::Communicator;
using accelerate::DistributedError;
using accelerate::JobState;
using accelerate::ReduceOp;
using accelerate::testing::contribution;
using ::testing::HasSubstr;

// Rank r of 4 on machine r / 2, as `accelerate launch` numbers two machines of two.
JobState two_machines_job(int rank, std::chrono::milliseconds timeout) {
  JobState job = accelerate::testing::thread_rank_job(rank, 4, timeout);
  job.node_rank = rank / 2;
  job.num_nodes = 2;
  job.local_rank = rank % 2;
  job.local_world_size = 2;
  return job;
}

void run_two_machines(const std::function<void(Communicator&)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  accelerate::testing::run_ranks_of_jobs(
      4, [&](int rank) { return two_machines_job(rank, timeout); },
      [&](int, std::shared_ptr<Communicator> comm) { body(*comm); });
}

// The members' contributions added in group-rank order.
at::Tensor group_sum(const std::vector<int>& job_ranks, int64_t numel) {
  at::Tensor sum = contribution(job_ranks[0], numel, at::kFloat);
  for (std::size_t i = 1; i < job_ranks.size(); ++i)
    sum = sum + contribution(job_ranks[i], numel, at::kFloat);
  return sum;
}

std::string distributed_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const DistributedError& error) {
    return error.what();
  }
  return "(no DistributedError)";
}

TEST(ProcessGroups, MachineGroupsSumInSharedMemoryAndReplicaGroupsOverGloo) {
  run_two_machines([](Communicator& world) {
    EXPECT_FALSE(world.sums_cpu_tensors_in_shared_memory());  // the job spans two machines
    const int me = world.rank();
    auto machine = world.split({{0, 1}, {2, 3}});
    auto replicas = world.split({{0, 2}, {1, 3}});
    ASSERT_NE(machine, nullptr);
    ASSERT_NE(replicas, nullptr);
    // Places in the groups, and the job's numbers of their members.
    EXPECT_EQ(machine->rank(), me % 2);
    EXPECT_EQ(machine->world_size(), 2);
    EXPECT_EQ(machine->job().num_nodes, 1);
    EXPECT_EQ(machine->job_rank(1), me < 2 ? 1 : 3);
    EXPECT_EQ(replicas->rank(), me / 2);
    EXPECT_EQ(replicas->job().num_nodes, 2);
    EXPECT_EQ(replicas->job().local_world_size, 1);
    EXPECT_EQ(replicas->job_rank(1), me % 2 + 2);
    EXPECT_TRUE(machine->sums_cpu_tensors_in_shared_memory());
    EXPECT_FALSE(replicas->sums_cpu_tensors_in_shared_memory());

    const int64_t numel = 1000;
    const std::vector<int> machine_members =
        me < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    const std::vector<int> replica_members{me % 2, me % 2 + 2};
    at::Tensor in_machine = contribution(me, numel, at::kFloat);
    machine->all_reduce(in_machine, ReduceOp::kSum);
    EXPECT_TRUE(at::equal(in_machine, group_sum(machine_members, numel)));
    at::Tensor across = contribution(me, numel, at::kFloat);
    replicas->all_reduce(across, ReduceOp::kSum);
    EXPECT_TRUE(at::equal(across, group_sum(replica_members, numel)));

    // Sharded training's collectives in a group: shard r of the members' sum.
    at::Tensor shard = at::empty({numel / 2});
    machine->reduce_scatter_sum(contribution(me, numel, at::kFloat), shard);
    EXPECT_TRUE(at::equal(
        shard,
        group_sum(machine_members, numel).narrow(0, machine->rank() * numel / 2, numel / 2)));
    at::Tensor gathered = at::empty({numel});
    replicas->all_gather_into(at::full({numel / 2}, static_cast<float>(me)), gathered);
    EXPECT_TRUE(at::equal(gathered.narrow(0, numel / 2, numel / 2),
                          at::full({numel / 2}, static_cast<float>(me % 2 + 2))));

    at::Tensor value = at::full({3}, static_cast<float>(me));
    replicas->broadcast(value, 1);  // group rank 1: job rank 2 or 3
    EXPECT_TRUE(at::equal(value, at::full({3}, static_cast<float>(me % 2 + 2))));
    machine->barrier();
    world.barrier();
  });
}

TEST(ProcessGroups, GroupsOfGroupsAndProcessesOutsideAGroup) {
  run_two_machines([](Communicator& world) {
    auto first_three = world.new_group({2, 0, 1});  // order gives the group's ranks
    if (world.rank() == 3) {
      EXPECT_EQ(first_three, nullptr);
      return;
    }
    ASSERT_NE(first_three, nullptr);
    EXPECT_EQ(first_three->rank(), world.rank() == 2 ? 0 : world.rank() + 1);
    auto pair = first_three->new_group({0, 2});  // job ranks 2 and 1
    if (first_three->rank() == 1) {
      EXPECT_EQ(pair, nullptr);
      return;
    }
    ASSERT_NE(pair, nullptr);
    EXPECT_EQ(pair->job_rank(0), 2);
    EXPECT_EQ(pair->job_rank(1), 1);
    EXPECT_EQ(pair->job().num_nodes, 2);
    at::Tensor value = at::full({2}, static_cast<float>(world.rank()));
    pair->all_reduce(value, ReduceOp::kSum);
    EXPECT_TRUE(at::equal(value, at::full({2}, 3.0f)));
  });
}

TEST(ProcessGroups, GroupsMadeInAnotherOrderAreNamedOnEveryProcess) {
  run_two_machines([](Communicator& world) {
    // Ranks 0 and 1 make {0, 1} first, ranks 2 and 3 make {2, 3} first.
    const std::vector<int> first =
        world.rank() < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    const std::string message = distributed_error_of([&] { world.new_group(first); });
    EXPECT_THAT(message,
                HasSubstr("rank " + std::to_string(world.rank()) + ": process group #1 (ranks "));
    EXPECT_THAT(
        message,
        HasSubstr(world.rank() < 2
                      ? "this process asked for ranks 0, 1 but rank 2 asked for ranks 2, 3"
                      : "this process asked for ranks 2, 3 but rank 0 asked for ranks 0, 1"));
    EXPECT_THAT(message, HasSubstr("in the same order"));
  });
}

TEST(ProcessGroups, AProcessThatNeverMakesTheGroupIsNamedAfterTheTimeout) {
  run_two_machines(
      [](Communicator& world) {
        if (world.rank() == 3) return;  // never asks
        const std::string message = distributed_error_of([&] { world.new_group({0, 1, 2, 3}); });
        EXPECT_THAT(message, HasSubstr("rank(s) 3 did not create it within 2 s"));
      },
      std::chrono::seconds(2));
}

TEST(ProcessGroups, AFailedCollectiveInAGroupNamesProcessesAsTheJobNumbersThem) {
  run_two_machines(
      [](Communicator& world) {
        auto machine = world.split({{0, 1}, {2, 3}});
        if (world.rank() != 2) return;  // rank 3 never joins the sum
        at::Tensor value = at::ones({4});
        const std::string message =
            distributed_error_of([&] { machine->all_reduce(value, ReduceOp::kMax); });
        EXPECT_THAT(message, HasSubstr("rank 2: all_reduce(max) in process group #2 (ranks 2, 3)"));
        EXPECT_THAT(message,
                    HasSubstr("peers that never arrived (exited, hung, or busy elsewhere): 3"));
      },
      std::chrono::seconds(2));
}

TEST(ProcessGroups, BadListsAreTheSameErrorOnEveryProcess) {
  run_two_machines([](Communicator& world) {
    const auto error_of = [](const std::function<void()>& fn) -> std::string {
      try {
        fn();
      } catch (const accelerate::Error& error) {
        return error.what();
      }
      return "(no error)";
    };
    EXPECT_EQ(error_of([&] { world.new_group({}); }), "new_group: the list of ranks is empty");
    EXPECT_EQ(error_of([&] {
                world.new_group({0, 4});
              }),
              "new_group: rank 4 is not in this communicator (ranks 0..3)");
    EXPECT_EQ(error_of([&] {
                world.new_group({1, 1});
              }),
              "new_group: rank 1 is listed twice (1, 1)");
    EXPECT_EQ(error_of([&] {
                world.split({{0, 1}, {1, 2, 3}});
              }),
              "split: rank 1 is in 2 groups of the partition; each process must be in exactly one");
    // None of them numbered a group: the next one still agrees everywhere.
    auto all = world.new_group({0, 1, 2, 3});
    ASSERT_NE(all, nullptr);
    EXPECT_EQ(all->rank(), world.rank());
  });
}

TEST(ProcessGroups, AOneProcessJobHasOneProcessGroups) {
  JobState job;
  auto world = Communicator::connect(job);
  auto group = world->new_group({0});
  ASSERT_NE(group, nullptr);
  at::Tensor value = at::ones({2});
  group->all_reduce(value, ReduceOp::kSum);
  EXPECT_TRUE(at::equal(value, at::ones({2})));
  EXPECT_EQ(group->job_rank(0), 0);
}

}  // namespace process_group_test
