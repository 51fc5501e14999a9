// What the collectives of a process moved: bytes sent and received, by
// process group, by kind of collective and by transport, with the share
// that went to or came from processes on other machines (the traffic that
// crosses the network between machines, usually the slowest link of a
// job). Read with Communicator::traffic(); docs/distributed.md, "Traffic
// counters", says how each collective is counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accelerate {

// The collectives as the counters tell them apart. All-gathers of bytes and
// of same-shape tensors (gather, gather_for_metrics, objects) are kAllGather.
enum class TrafficKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll };
const char* to_string(TrafficKind kind);

// What carried the bytes: shared memory between processes of one machine,
// Gloo's TCP connections, or NCCL.
enum class Transport { kSharedMemory, kGloo, kNccl };
const char* to_string(Transport transport);

// Bytes of one process, counted when each collective starts. A collective
// that fails still counts: its bytes were meant to move.
struct TrafficCount {
  std::uint64_t collectives = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  // Of the above, to and from processes on other machines.
  std::uint64_t bytes_sent_off_machine = 0;
  std::uint64_t bytes_received_off_machine = 0;

  TrafficCount& operator+=(const TrafficCount& other);
};

// One kind of collective over one transport in one group.
struct TrafficEntry {
  TrafficKind kind = TrafficKind::kAllReduce;
  Transport transport = Transport::kGloo;
  TrafficCount count;
};

// A communicator's traffic on this process: the whole job's, or a process
// group's (Communicator::new_group).
struct GroupTraffic {
  std::string group;           // "job", or "process group #2 (ranks 0, 1)"
  std::vector<int> job_ranks;  // the members, as the job numbers them
  bool spans_machines = false;
  std::vector<TrafficEntry> entries;  // one per (kind, transport) that moved anything

  TrafficCount total() const;
  TrafficCount of(TrafficKind kind) const;
};

// Sums over groups: e.g. total(traffic).bytes_sent_off_machine is what this
// process sent across machines in every group it belongs to.
TrafficCount total(const std::vector<GroupTraffic>& traffic);

}  // namespace accelerate
