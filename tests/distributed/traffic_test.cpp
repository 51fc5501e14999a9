// Communicator::traffic(): four thread ranks act as two machines of two
// processes. Each collective counts the bytes its algorithm sends to and
// receives from each peer, split by whether the peer is on another machine;
// groups count apart, and the transport is the one that moved the bytes.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accelerate/distributed/communication_traffic.h"
#include "support/thread_ranks.h"

namespace traffic_test {

using accelerate::Communicator;
using accelerate::GroupTraffic;
using accelerate::JobState;
using accelerate::ReduceOp;
using accelerate::TrafficCount;
using accelerate::TrafficKind;
using accelerate::Transport;

JobState machine_of_two(int rank) {
  JobState job = accelerate::testing::thread_rank_job(rank, 4);
  job.node_rank = rank / 2;
  job.num_nodes = 2;
  job.local_rank = rank % 2;
  job.local_world_size = 2;
  return job;
}

void run_two_machines(const std::function<void(Communicator&)>& body) {
  accelerate::testing::run_ranks_of_jobs(
      4, machine_of_two, [&](int, std::shared_ptr<Communicator> comm) { body(*comm); });
}

// The count of `kind` over `transport` in the group named `group`.
TrafficCount count_of(const std::vector<GroupTraffic>& traffic, const std::string& group,
                      TrafficKind kind, Transport transport) {
  for (const auto& g : traffic) {
    if (g.group != group) continue;
    for (const auto& entry : g.entries) {
      if (entry.kind == kind && entry.transport == transport) return entry.count;
    }
  }
  return {};
}

void expect_count(const TrafficCount& count, std::uint64_t collectives, std::uint64_t sent,
                  std::uint64_t received, std::uint64_t sent_off, std::uint64_t received_off,
                  const std::string& what) {
  EXPECT_EQ(count.collectives, collectives) << what;
  EXPECT_EQ(count.bytes_sent, sent) << what;
  EXPECT_EQ(count.bytes_received, received) << what;
  EXPECT_EQ(count.bytes_sent_off_machine, sent_off) << what;
  EXPECT_EQ(count.bytes_received_off_machine, received_off) << what;
}

TEST(Traffic, FlatBufferCollectivesCountEveryPeerAndTheOnesOnOtherMachines) {
  run_two_machines([](Communicator& world) {
    constexpr int64_t kShard = 1000;  // floats: 4000 bytes to and from each peer
    at::Tensor buffer = at::ones({4 * kShard});
    at::Tensor shard = at::empty({kShard});
    world.reduce_scatter_sum(buffer, shard);
    world.reduce_scatter_sum(buffer, shard);
    world.all_gather_into(shard, buffer);
    const auto traffic = world.traffic();
    ASSERT_EQ(traffic.size(), 1u);
    EXPECT_EQ(traffic[0].group, "job");
    EXPECT_EQ(traffic[0].job_ranks, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_TRUE(traffic[0].spans_machines);
    // Three peers, two of them on the other machine.
    expect_count(count_of(traffic, "job", TrafficKind::kReduceScatter, Transport::kGloo), 2,
                 2 * 3 * 4000, 2 * 3 * 4000, 2 * 2 * 4000, 2 * 2 * 4000, "reduce-scatter");
    expect_count(count_of(traffic, "job", TrafficKind::kAllGather, Transport::kGloo), 1, 3 * 4000,
                 3 * 4000, 2 * 4000, 2 * 4000, "all-gather");
    EXPECT_EQ(traffic[0].total().bytes_sent, 9u * 4000);
  });
}

TEST(Traffic, RingAllReduceCountsTheNextAndPreviousRank) {
  run_two_machines([](Communicator& world) {
    const int me = world.rank();
    at::Tensor t = at::ones({1024});  // 4096 bytes: 2 * 3/4 of them leave each rank
    world.all_reduce(t, ReduceOp::kSum);
    // Gloo has no bf16 sum: the widened fp32 copy is what moves.
    at::Tensor half = at::ones({1024}, at::kBFloat16);
    world.all_reduce(half, ReduceOp::kSum);
    const auto count = count_of(world.traffic(), "job", TrafficKind::kAllReduce, Transport::kGloo);
    // Ring 0 -> 1 -> 2 -> 3 -> 0: ranks 1 and 3 send to the other machine,
    // ranks 0 and 2 receive from it.
    const std::uint64_t each = 2 * 3 * 4096 / 4;
    expect_count(count, 2, 2 * each, 2 * each, me % 2 == 1 ? 2 * each : 0,
                 me % 2 == 0 ? 2 * each : 0, "all-reduce on rank " + std::to_string(me));
  });
}

TEST(Traffic, BroadcastCountsTheRootSendingToEachMember) {
  run_two_machines([](Communicator& world) {
    const int me = world.rank();
    at::Tensor t = at::ones({100});  // 400 bytes
    world.broadcast(t, 1);
    const auto count = count_of(world.traffic(), "job", TrafficKind::kBroadcast, Transport::kGloo);
    if (me == 1) {
      expect_count(count, 1, 3 * 400, 0, 2 * 400, 0, "root");
    } else {
      expect_count(count, 1, 0, 400, 0, me >= 2 ? 400 : 0, "rank " + std::to_string(me));
    }
  });
}

TEST(Traffic, GroupsCountApartWithTheirTransport) {
  run_two_machines([](Communicator& world) {
    const int me = world.rank();
    auto machine = world.split({{0, 1}, {2, 3}});
    auto replicas = world.split({{0, 2}, {1, 3}});
    at::Tensor buffer = at::ones({2 * 500});
    at::Tensor shard = at::empty({500});
    machine->reduce_scatter_sum(buffer, shard);  // shared memory, inside the machine
    at::Tensor t = at::ones({250});
    replicas->all_reduce(t, ReduceOp::kSum);  // Gloo, across the machines
    // Read from any communicator of the job: the job's, then the groups this
    // process is in, in the order they were made.
    const auto traffic = replicas->traffic();
    ASSERT_EQ(traffic.size(), 3u);
    EXPECT_EQ(traffic[0].group, "job");
    EXPECT_TRUE(traffic[0].entries.empty());
    EXPECT_EQ(traffic[1].job_ranks, me < 2 ? (std::vector<int>{0, 1}) : (std::vector<int>{2, 3}));
    EXPECT_FALSE(traffic[1].spans_machines);
    EXPECT_EQ(traffic[2].job_ranks,
              me % 2 == 0 ? (std::vector<int>{0, 2}) : (std::vector<int>{1, 3}));
    EXPECT_TRUE(traffic[2].spans_machines);
    expect_count(
        count_of(traffic, traffic[1].group, TrafficKind::kReduceScatter, Transport::kSharedMemory),
        1, 2000, 2000, 0, 0, "machine group");
    expect_count(count_of(traffic, traffic[2].group, TrafficKind::kAllReduce, Transport::kGloo), 1,
                 1000, 1000, 1000, 1000, "replica group");
    EXPECT_EQ(accelerate::total(traffic).bytes_sent_off_machine, 1000u);
    world.reset_traffic();
    for (const auto& group : machine->traffic()) {
      EXPECT_TRUE(group.entries.empty()) << group.group;
    }
  });
}

TEST(Traffic, OneMachineSumsThroughSharedMemoryAndGathersThroughGloo) {
  accelerate::testing::run_ranks(2, [](Communicator& comm) {
    at::Tensor t = at::ones({256});  // 1024 bytes
    comm.all_reduce(t, ReduceOp::kSum);
    comm.all_gather_same_shape(t);
    const auto traffic = comm.traffic();
    ASSERT_EQ(traffic.size(), 1u);
    EXPECT_FALSE(traffic[0].spans_machines);
    expect_count(count_of(traffic, "job", TrafficKind::kAllReduce, Transport::kSharedMemory), 1,
                 1024, 1024, 0, 0, "all-reduce");
    expect_count(count_of(traffic, "job", TrafficKind::kAllGather, Transport::kGloo), 1, 1024, 1024,
                 0, 0, "all-gather");
  });
}

TEST(Traffic, OneProcessMovesNothing) {
  JobState job = accelerate::testing::thread_rank_job(0, 1);
  auto comm = Communicator::connect(job);
  at::Tensor t = at::ones({8});
  comm->all_reduce(t, ReduceOp::kSum);
  const auto traffic = comm->traffic();
  ASSERT_EQ(traffic.size(), 1u);
  EXPECT_EQ(traffic[0].group, "job");
  EXPECT_TRUE(traffic[0].entries.empty());
}

}  // namespace traffic_test
