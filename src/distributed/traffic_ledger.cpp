#include "distributed/traffic_ledger.h"

#include <algorithm>
#include <utility>

#include "accelerate/detail/enum_names.h"

namespace accelerate {

namespace {
constexpr detail::EnumName<TrafficKind> kTrafficKindNames[] = {
    {TrafficKind::kAllReduce, "all_reduce"},
    {TrafficKind::kReduceScatter, "reduce_scatter"},
    {TrafficKind::kAllGather, "all_gather"},
    {TrafficKind::kBroadcast, "broadcast"},
    {TrafficKind::kAllToAll, "all_to_all"}};
static_assert(detail::names_are_distinct(kTrafficKindNames));
constexpr detail::EnumName<Transport> kTransportNames[] = {
    {Transport::kSharedMemory, "shared memory"},
    {Transport::kGloo, "gloo"},
    {Transport::kNccl, "nccl"}};
static_assert(detail::names_are_distinct(kTransportNames));
}  // namespace

const char* to_string(TrafficKind kind) { return detail::enum_name(kTrafficKindNames, kind, "?"); }
const char* to_string(Transport transport) {
  return detail::enum_name(kTransportNames, transport, "?");
}

TrafficCount& TrafficCount::operator+=(const TrafficCount& other) {
  collectives += other.collectives;
  bytes_sent += other.bytes_sent;
  bytes_received += other.bytes_received;
  bytes_sent_off_machine += other.bytes_sent_off_machine;
  bytes_received_off_machine += other.bytes_received_off_machine;
  return *this;
}

TrafficCount GroupTraffic::total() const {
  TrafficCount sum;
  for (const auto& entry : entries) sum += entry.count;
  return sum;
}

TrafficCount GroupTraffic::of(TrafficKind kind) const {
  TrafficCount sum;
  for (const auto& entry : entries) {
    if (entry.kind == kind) sum += entry.count;
  }
  return sum;
}

TrafficCount total(const std::vector<GroupTraffic>& traffic) {
  TrafficCount sum;
  for (const auto& group : traffic) sum += group.total();
  return sum;
}

namespace detail {

GroupCounters::GroupCounters(std::string group, std::vector<int> job_ranks, std::vector<int> nodes,
                             int me)
    : group_(std::move(group)),
      job_ranks_(std::move(job_ranks)),
      nodes_(std::move(nodes)),
      me_(me),
      spans_machines_(std::any_of(nodes_.begin(), nodes_.end(),
                                  [this](int node) { return node != nodes_.front(); })) {}

void GroupCounters::add(TrafficKind kind, Transport transport, const TrafficCount& count) {
  const std::size_t slot =
      static_cast<std::size_t>(kind) * kTransports + static_cast<std::size_t>(transport);
  MutexLock lock(mutex_);
  counts_[slot] += count;
}

void GroupCounters::count_exchange(TrafficKind kind, Transport transport, std::uint64_t bytes) {
  TrafficCount count;
  count.collectives = 1;
  const int members = static_cast<int>(nodes_.size());
  for (int peer = 0; peer < members; ++peer) {
    if (peer == me_) continue;
    count.bytes_sent += bytes;
    count.bytes_received += bytes;
    if (off_machine(peer)) {
      count.bytes_sent_off_machine += bytes;
      count.bytes_received_off_machine += bytes;
    }
  }
  add(kind, transport, count);
}

void GroupCounters::count_ring(TrafficKind kind, Transport transport, std::uint64_t bytes) {
  const int members = static_cast<int>(nodes_.size());
  TrafficCount count;
  count.collectives = 1;
  if (members > 1) {
    count.bytes_sent = count.bytes_received = bytes;
    if (off_machine((me_ + 1) % members)) count.bytes_sent_off_machine = bytes;
    if (off_machine((me_ + members - 1) % members)) count.bytes_received_off_machine = bytes;
  }
  add(kind, transport, count);
}

void GroupCounters::count_broadcast(Transport transport, std::uint64_t bytes, int root) {
  TrafficCount count;
  count.collectives = 1;
  const int members = static_cast<int>(nodes_.size());
  if (me_ == root) {
    for (int peer = 0; peer < members; ++peer) {
      if (peer == me_) continue;
      count.bytes_sent += bytes;
      if (off_machine(peer)) count.bytes_sent_off_machine += bytes;
    }
  } else {
    count.bytes_received = bytes;
    if (off_machine(root)) count.bytes_received_off_machine = bytes;
  }
  add(TrafficKind::kBroadcast, transport, count);
}

GroupTraffic GroupCounters::snapshot() const {
  GroupTraffic traffic;
  traffic.group = group_;
  traffic.job_ranks = job_ranks_;
  traffic.spans_machines = spans_machines_;
  MutexLock lock(mutex_);
  for (std::size_t slot = 0; slot < counts_.size(); ++slot) {
    if (counts_[slot].collectives == 0) continue;
    traffic.entries.push_back({static_cast<TrafficKind>(slot / kTransports),
                               static_cast<Transport>(slot % kTransports), counts_[slot]});
  }
  return traffic;
}

void GroupCounters::reset() {
  MutexLock lock(mutex_);
  counts_.fill(TrafficCount());
}

std::shared_ptr<GroupCounters> TrafficLedger::add(std::string group, std::vector<int> job_ranks,
                                                  std::vector<int> nodes, int me) {
  auto counters =
      std::make_shared<GroupCounters>(std::move(group), std::move(job_ranks), std::move(nodes), me);
  MutexLock lock(mutex_);
  groups_.push_back(counters);
  return counters;
}

std::vector<GroupTraffic> TrafficLedger::snapshot() const {
  MutexLock lock(mutex_);
  std::vector<GroupTraffic> traffic;
  for (const auto& group : groups_) traffic.push_back(group->snapshot());
  return traffic;
}

void TrafficLedger::reset() {
  MutexLock lock(mutex_);
  for (const auto& group : groups_) group->reset();
}

}  // namespace detail
}  // namespace accelerate
