// Communicator::new_group and split: process groups made collectively over
// the parent's store.
//
// Every process of the parent posts the group it asks for (and its machine)
// under the group's number, then reads everyone's post before anything is
// connected: c10d's new_group trusts that every process asks for the same
// group in the same order, and one that does not leaves the others hanging
// in Gloo's rendezvous until the timeout, with a message that names nobody.
// Here a mismatch is found at once and named, and a process that never asks
// is named when the timeout ends.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/communicator.h"
#include "distributed/communicator_impl.h"
#include "distributed/failure_diagnosis.h"

namespace accelerate {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

// What a process posts: the ranks it asks for, then its machine.
std::string group_post_of(const std::vector<int>& ranks, int node) {
  return rank_list(ranks) + "|" + std::to_string(node);
}

struct GroupPost {
  std::string ranks;  // as rank_list() wrote them
  int node = 0;
};

GroupPost parse_group_post(const std::string& text) {
  const auto bar = text.rfind('|');
  return {text.substr(0, bar), std::stoi(text.substr(bar + 1))};
}

// Same checks on every process, before any is numbered: the error is the same everywhere.
void check_group_members(const std::vector<int>& ranks, int world_size) {
  if (ranks.empty()) throw Error("new_group: the list of ranks is empty");
  std::set<int> seen;
  for (int rank : ranks) {
    if (rank < 0 || rank >= world_size) {
      throw Error("new_group: rank " + std::to_string(rank) +
                  " is not in this communicator (ranks 0.." + std::to_string(world_size - 1) + ")");
    }
    if (!seen.insert(rank).second) {
      throw Error("new_group: rank " + std::to_string(rank) + " is listed twice (" +
                  rank_list(ranks) + ")");
    }
  }
}

// The member at `index` of a group whose members run on `nodes` (by index):
// its place in the group, on its machine, and among the group's machines.
JobState group_member_job(const JobState& parent, int index, const std::vector<int>& nodes) {
  JobState job = parent;
  job.rank = index;
  job.world_size = static_cast<int>(nodes.size());
  const std::set<int> machines(nodes.begin(), nodes.end());
  job.num_nodes = static_cast<int>(machines.size());
  job.node_rank = static_cast<int>(std::distance(machines.begin(), machines.find(nodes[index])));
  job.local_rank = static_cast<int>(std::count(nodes.begin(), nodes.begin() + index, nodes[index]));
  job.local_world_size = static_cast<int>(std::count(nodes.begin(), nodes.end(), nodes[index]));
  return job;
}

}  // namespace

int Communicator::job_rank(int rank) const {
  return impl_->members.empty() ? rank : impl_->members.at(static_cast<std::size_t>(rank));
}

std::shared_ptr<Communicator> Communicator::new_group(const std::vector<int>& ranks,
                                                      const std::string& purpose) {
  check_group_members(ranks, world_size());
  const std::uint64_t number = ++impl_->groups_created;
  std::vector<int> job_ranks;
  for (int rank : ranks) job_ranks.push_back(job_rank(rank));
  const std::string label = (purpose.empty() ? "process" : purpose) + " group #" +
                            std::to_string(number) + " (ranks " + rank_list(job_ranks) + ")";
  const auto index_in_group = std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin();
  const bool member = index_in_group < static_cast<std::ptrdiff_t>(ranks.size());

  std::vector<int> nodes(ranks.size(), job().node_rank);
  if (!impl_->single()) {
    c10d::Store& store = *impl_->store;
    const std::string base = "groups/" + std::to_string(number) + "/";
    const std::string mine = group_post_of(ranks, job().node_rank);
    detail::set_text(store, base + std::to_string(rank()), mine);
    std::vector<std::string> keys;
    for (int peer = 0; peer < world_size(); ++peer) keys.push_back(base + std::to_string(peer));
    const std::string me = "rank " + std::to_string(job_rank(rank())) + ": " + label + ": ";
    try {
      store.wait(keys);
    } catch (const std::exception& cause) {
      std::vector<int> missing;
      for (int peer = 0; peer < world_size(); ++peer) {
        if (!store.check({keys[static_cast<std::size_t>(peer)]})) missing.push_back(job_rank(peer));
      }
      throw DistributedError(me + "rank(s) " + rank_list(missing) + " did not create it within " +
                             detail::format_seconds(job().timeout) +
                             " (every process creates the same process groups, in the same order)");
    }
    std::map<int, int> node_of;  // by rank here
    for (int peer = 0; peer < world_size(); ++peer) {
      const GroupPost post =
          parse_group_post(detail::get_text(store, keys[static_cast<std::size_t>(peer)]));
      if (post.ranks != rank_list(ranks)) {
        throw DistributedError(
            me + "this process asked for ranks " + rank_list(ranks) + " but rank " +
            std::to_string(job_rank(peer)) + " asked for ranks " + post.ranks +
            " (every process creates the same process groups, in the same order)");
      }
      node_of[peer] = post.node;
    }
    for (std::size_t i = 0; i < ranks.size(); ++i) nodes[i] = node_of[ranks[i]];
  }
  if (!member) return nullptr;

  JobState job = group_member_job(impl_->job, static_cast<int>(index_in_group), nodes);
  std::unique_ptr<Impl> impl;
  if (job.world_size == 1) {
    impl = detail::form_single(std::move(job), std::move(job_ranks), label, impl_->ledger);
  } else {
    auto store =
        c10::make_intrusive<c10d::PrefixStore>("group" + std::to_string(number), impl_->store);
    impl = detail::form_groups(std::move(job), std::move(store), impl_->gloo_hostname,
                               std::move(job_ranks), std::move(nodes), label, impl_->ledger);
  }
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

std::shared_ptr<Communicator> Communicator::split(const std::vector<std::vector<int>>& partition,
                                                  const std::string& purpose) {
  std::vector<int> count(static_cast<std::size_t>(world_size()), 0);
  for (const auto& group : partition) {
    check_group_members(group, world_size());
    for (int rank : group) ++count[static_cast<std::size_t>(rank)];
  }
  for (int rank = 0; rank < world_size(); ++rank) {
    if (count[static_cast<std::size_t>(rank)] != 1) {
      throw Error("split: rank " + std::to_string(rank) + " is in " +
                  std::to_string(count[static_cast<std::size_t>(rank)]) +
                  " groups of the partition; each process must be in exactly one");
    }
  }
  std::shared_ptr<Communicator> mine;
  for (const auto& group : partition) {
    if (auto made = new_group(group, purpose)) mine = std::move(made);
  }
  return mine;
}

}  // namespace accelerate
