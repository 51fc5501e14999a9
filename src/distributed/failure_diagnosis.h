// When a collective fails, c10d's message ("Timed out waiting 5000ms for
// recv operation") names neither the operation nor the peer at fault. Each
// failing rank therefore posts what it was doing to the rendezvous store and
// reads, for a short window, what its peers posted; the result is one line
// that says which peers never showed up. Nothing is written on the hot path:
// only failures pay.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace accelerate {
namespace detail {

// The first line of an exception's message, without LibTorch's backtrace.
std::string first_line_of(const std::exception& error);

// "1.5 s"
std::string format_seconds(std::chrono::milliseconds duration);

// Text values in a c10d store, which holds byte vectors. get_text blocks
// until the key exists, up to the store's timeout.
void set_text(c10d::Store& store, const std::string& key, const std::string& text);
std::string get_text(c10d::Store& store, const std::string& key);

class FailureDiagnosis {
 public:
  // `global_ranks`: for a process group, the job's rank of each group rank
  // (messages name processes as the job numbers them); empty for the whole
  // job. `group`: how messages name the group ("process group #1 (ranks 2,
  // 3)"); empty for the whole job.
  FailureDiagnosis(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                   std::chrono::milliseconds timeout, std::vector<int> global_ranks = {},
                   std::string group = "");

  // Explains a failed collective number `sequence` named `what`.
  std::string explain_collective(std::uint64_t sequence, const std::string& what,
                                 const std::string& cause) const;

  // Rendezvous bookkeeping: mark this rank as arrived, and explain a failed
  // rendezvous by listing the ranks that never marked themselves.
  void mark_arrived() const;
  std::string explain_rendezvous(const std::string& cause) const;

  // How long a failing rank waits for its peers' reports.
  std::chrono::milliseconds window() const { return window_; }

 private:
  std::string report_key(int rank) const;
  int global(int rank) const { return global_ranks_.empty() ? rank : global_ranks_[rank]; }
  std::string global_list(const std::vector<int>& ranks) const;
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds window_;
  std::vector<int> global_ranks_;
  std::string group_;
};

}  // namespace detail
}  // namespace accelerate
