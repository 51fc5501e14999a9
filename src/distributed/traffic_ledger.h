// The counters behind Communicator::traffic(): one GroupCounters per
// communicator (the job's and each process group's), all listed in the
// job's TrafficLedger, which the whole tree of communicators on a process
// shares. Collectives count when they start, on whatever thread starts
// them (gradient buckets start in backward hooks), hence the locks.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "accelerate/distributed/communication_traffic.h"
#include "common/mutex.h"

namespace accelerate::detail {

// One communicator's counts. Each collective is counted by the pattern its
// algorithm sends in (docs/distributed.md, "Traffic counters"), which says
// for each peer how many bytes go to and come from it; `nodes` (the machine
// of each member) then says which of them cross machines.
class GroupCounters {
 public:
  GroupCounters(std::string group, std::vector<int> job_ranks, std::vector<int> nodes, int me);

  // `bytes` to every other member and as many from each (this project's
  // reduce-scatter and all-gather of flat buffers).
  void count_exchange(TrafficKind kind, Transport transport, std::uint64_t bytes);
  // `bytes` to the next member and as many from the previous one (ring
  // algorithms: Gloo's all-reduce and all-gather, NCCL's).
  void count_ring(TrafficKind kind, Transport transport, std::uint64_t bytes);
  // `bytes` from member `root` to each other member, as a flat broadcast
  // would (a tree relays through members: the job's total is the same).
  void count_broadcast(Transport transport, std::uint64_t bytes, int root);

  GroupTraffic snapshot() const;
  void reset();

 private:
  static constexpr std::size_t kKinds = 5, kTransports = 3;
  bool off_machine(int member) const { return nodes_[member] != nodes_[me_]; }
  void add(TrafficKind kind, Transport transport, const TrafficCount& count);

  const std::string group_;
  const std::vector<int> job_ranks_;
  const std::vector<int> nodes_;
  const int me_;
  const bool spans_machines_;
  mutable Mutex mutex_;
  std::array<TrafficCount, kKinds * kTransports> counts_ GUARDED_BY(mutex_);
};

// Every communicator of one job on this process, in the order they were made.
class TrafficLedger {
 public:
  std::shared_ptr<GroupCounters> add(std::string group, std::vector<int> job_ranks,
                                     std::vector<int> nodes, int me);
  std::vector<GroupTraffic> snapshot() const;
  void reset();

 private:
  mutable Mutex mutex_;
  std::vector<std::shared_ptr<GroupCounters>> groups_ GUARDED_BY(mutex_);
};

}  // namespace accelerate::detail
