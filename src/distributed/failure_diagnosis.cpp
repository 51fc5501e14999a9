#include "distributed/failure_diagnosis.h"

#include <algorithm>
#include <sstream>
#include <thread>
#include <vector>

#include <c10/util/Exception.h>

namespace accelerate {
namespace detail {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(20);
const char kRendezvousPrefix[] = "accelerate/rendezvous/";

std::string join_ranks(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

// Polls until every key exists or `window` passes; returns which exist.
std::vector<bool> wait_for_keys(c10d::Store& store, const std::vector<std::string>& keys,
                                std::chrono::milliseconds window) {
  std::vector<bool> present(keys.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + window;
  while (true) {
    bool all = true;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!present[i]) present[i] = store.check({keys[i]});
      all = all && present[i];
    }
    if (all || std::chrono::steady_clock::now() >= deadline) return present;
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace

void set_text(c10d::Store& store, const std::string& key, const std::string& text) {
  store.set(key, std::vector<uint8_t>(text.begin(), text.end()));
}

std::string get_text(c10d::Store& store, const std::string& key) {
  const std::vector<uint8_t> bytes = store.get(key);
  return std::string(bytes.begin(), bytes.end());
}

std::string format_seconds(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out << duration.count() / 1000.0 << " s";
  return out.str();
}

std::string first_line_of(const std::exception& error) {
  std::string text;
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&error)) {
    text = c10_error->what_without_backtrace();
  } else {
    text = error.what();
  }
  auto newline = text.find('\n');
  if (newline != std::string::npos) text.resize(newline);
  return text;
}

FailureDiagnosis::FailureDiagnosis(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                                   std::chrono::milliseconds timeout, std::vector<int> global_ranks,
                                   std::string group)
    : store_(std::move(store)),
      rank_(rank),
      world_size_(world_size),
      timeout_(timeout),
      // Peers that failed in the same collective report within milliseconds
      // of each other; wait a little longer, but never long.
      window_(
          std::clamp(timeout / 4, std::chrono::milliseconds(200), std::chrono::milliseconds(2000))),
      global_ranks_(std::move(global_ranks)),
      group_(std::move(group)) {}

std::string FailureDiagnosis::global_list(const std::vector<int>& ranks) const {
  std::vector<int> global_ranks;
  for (int rank : ranks) global_ranks.push_back(global(rank));
  return join_ranks(global_ranks);
}

std::string FailureDiagnosis::report_key(int rank) const {
  return "accelerate/failure/" + std::to_string(rank);
}

std::string FailureDiagnosis::explain_collective(std::uint64_t sequence, const std::string& what,
                                                 const std::string& cause) const {
  std::ostringstream line;
  line << "rank " << global(rank_) << ": " << what << (group_.empty() ? "" : " in " + group_)
       << " (collective #" << sequence << ") failed: " << cause;
  if (!store_) return line.str();
  const std::string mine = std::to_string(sequence) + " " + what;
  try {
    set_text(*store_, report_key(rank_), mine);
    std::vector<int> peers;
    std::vector<std::string> keys;
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == rank_) continue;
      peers.push_back(peer);
      keys.push_back(report_key(peer));
    }
    auto present = wait_for_keys(*store_, keys, window_);
    std::vector<int> silent;
    std::vector<std::string> elsewhere;
    for (size_t i = 0; i < peers.size(); ++i) {
      if (!present[i]) {
        silent.push_back(peers[i]);
        continue;
      }
      const std::string theirs = get_text(*store_, keys[i]);
      if (theirs != mine) {
        auto space = theirs.find(' ');
        elsewhere.push_back("rank " + std::to_string(global(peers[i])) + " failed in " +
                            theirs.substr(space + 1) + " (#" + theirs.substr(0, space) + ")");
      }
    }
    if (!silent.empty()) {
      line << "; peers that never arrived (exited, hung, or busy elsewhere): "
           << global_list(silent);
    }
    for (const auto& report : elsewhere) line << "; " << report;
    if (silent.empty() && elsewhere.empty()) line << "; every peer failed in it too";
  } catch (const std::exception& store_error) {
    line << "; could not ask the peers (rendezvous store on rank 0 unreachable: "
         << first_line_of(store_error) << ")";
  }
  return line.str();
}

void FailureDiagnosis::mark_arrived() const {
  set_text(*store_, kRendezvousPrefix + std::to_string(rank_), "1");
}

std::string FailureDiagnosis::explain_rendezvous(const std::string& cause) const {
  std::ostringstream line;
  line << "rank " << global(rank_) << ": "
       << (group_.empty() ? "rendezvous of " + std::to_string(world_size_) + " ranks"
                          : "connecting " + group_)
       << " failed within " << format_seconds(timeout_) << ": " << cause;
  try {
    std::vector<std::string> keys;
    for (int peer = 0; peer < world_size_; ++peer) {
      keys.push_back(kRendezvousPrefix + std::to_string(peer));
    }
    auto present = wait_for_keys(*store_, keys, std::chrono::milliseconds(0));
    std::vector<int> missing;
    for (int peer = 0; peer < world_size_; ++peer) {
      if (!present[peer]) missing.push_back(peer);
    }
    if (!missing.empty()) line << "; ranks that never arrived: " << global_list(missing);
  } catch (const std::exception& store_error) {
    line << "; rendezvous store unreachable: " << first_line_of(store_error);
  }
  return line.str();
}

}  // namespace detail
}  // namespace accelerate
